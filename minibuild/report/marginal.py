"""Marginal bytes: what would disappear from a stripped library if an operator (or a
model) were taken out of the build.

An operator's own kernel objects are often small: a convolution's kernel is a thin
wrapper and its work happens in a support unit (`support/gemm`) that other operators
need too. The marginal bytes of removing a set of kernel objects are:

- kernels:   the removed kernel objects (all their sections, merged constants only
             they hold included);
- support:   the support units (ops_registry `requires:`) that no remaining operator
             requires, and, where the link map gives the section graph (ELF), the
             routines of remaining support units that only removed code called
             (`--gc-sections` replayed on the objects' relocations: sections.py);
- runtime:   likewise, runtime-core routines only removed code called;
- constants: merged constants (`shared:` components) held only by removed objects;
- padding:   the alignment padding in front of the removed objects' input sections;
- registry:  their rows in the generated kernel table (row bytes and the dynamic
             relocations of its pointers) and an operator's name string when only
             its rows used it;
- imports:   the dynamic-linking bytes (.dynsym, .dynstr, hash, version, PLT/GOT,
             relocation) of library functions only removed objects call.

Not counted: merged strings of remaining objects that only removed code used, a
DT_NEEDED library no longer needed, changes of hash-table, page or segment
alignment. Removing an operator therefore shrinks a real library by its marginal
bytes give or take that slack (tests/test_size_report.py measures it).
"""

from __future__ import annotations

from collections import defaultdict

from .attribution import Attribution

PARTS = ("kernels", "support", "runtime", "constants", "padding", "registry", "imports")


class Marginal:
    def __init__(self, att: Attribution, requires: dict[str, list[str]]):
        L = att.ledger
        self.att = att
        self.comps = L.components
        self.kernels_of: dict[str, list[str]] = defaultdict(list)        # op -> kernel object ids
        self.kernel_of: dict[tuple[str, str], str] = {}                  # (op, dtype) -> kernel object id
        self.unit_obj: dict[str, str] = {}                               # support unit -> object id
        for c in self.comps.values():
            if c.kind == "kernel":
                self.kernels_of[c.op].append(c.id)
                self.kernel_of[(c.op, c.dtype)] = c.id
            elif c.kind == "support":
                self.unit_obj[c.name.split("/", 1)[1]] = c.id
        self.requires = {op: set(requires.get(op, ())) & set(self.unit_obj) for op in self.kernels_of}
        self.shared = [c for c in self.comps.values() if c.kind == "shared"]

    def remove(self, kernels: set[str]) -> dict:
        """Marginal bytes of removing these kernel objects (ids)."""
        kernels = {k for k in kernels if k in self.comps}
        gone = sorted(op for op, ks in self.kernels_of.items() if set(ks) <= kernels)
        left = set(self.kernels_of) - set(gone)
        still = set().union(*(self.requires[op] for op in left)) if left else set()
        units = sorted(u for op in gone for u in self.requires[op] if u not in still)
        units = sorted(set(units))
        removed = kernels | {self.unit_obj[u] for u in units}
        costs = self.att.costs
        graph = self.att.graph
        support = sum(self.comps[self.unit_obj[u]].bytes for u in units)
        runtime = 0
        if graph is not None:
            # --gc-sections replayed: code of the objects that stay which only removed code reached.
            lost = graph.lost(removed)
            for node in lost:
                kind = self.comps[node[0]].kind if node[0] in self.comps else "other"
                if node[0] in removed or kind in ("registry", "kernel"):
                    continue
                if kind == "support":
                    support += graph.size[node]
                else:
                    runtime += graph.size[node]
            users: dict[str, set] = defaultdict(set)
            for node in graph.full():
                for name in graph.imports.get(node, ()):
                    users[name].add(node)
            imports = sorted(n for n in costs.imports if users.get(n) and users[n] <= lost)
            strings = graph.strings_lost(lost, removed)
        else:
            imports = sorted(n for n, who in costs.importers.items() if who and set(who) <= removed)
            strings = 0
        parts = {
            "kernels": sum(self.comps[k].bytes for k in kernels),
            "support": support,
            "runtime": runtime,
            "constants": sum(c.bytes for c in self.shared if set(c.objects) <= removed) + strings,
            "padding": sum(self.att.ledger.padding_of.get(r, 0) for r in removed),
            "registry": round(len(kernels) * costs.registry_row) + sum(costs.op_names.get(op, 0) for op in gone),
            "imports": sum(costs.imports[n] for n in imports),
        }
        return {"bytes": sum(parts.values()), "parts": parts, "ops_removed": gone, "support_removed": units,
                "imports_removed": imports}

    def op(self, op: str) -> dict:
        return {"op": op, **self.remove(set(self.kernels_of.get(op, ())))}

    def model(self, name: str, needs: dict[str, set[tuple[str, str]]]) -> dict:
        """needs: model -> the (domain.op, dtype) kernels it asks for."""
        others = set().union(*(k for m, k in needs.items() if m != name)) if len(needs) > 1 else set()
        only = sorted(needs.get(name, set()) - others)
        got = self.remove({self.kernel_of[k] for k in only if k in self.kernel_of})
        return {"model": name, "kernels_removed": [f"{op}:{dt}" for op, dt in only], **got}

    def shared_support(self) -> list[dict]:
        """Support units several operators require, with what removing all of them frees."""
        rows = []
        for unit, obj in sorted(self.unit_obj.items()):
            ops = sorted(op for op, req in self.requires.items() if unit in req)
            if len(ops) < 2:
                continue
            together = self.remove({k for op in ops for k in self.kernels_of[op]})
            rows.append({"unit": unit, "bytes": self.comps[obj].bytes, "ops": ops,
                         "marginal_bytes_of_ops": together["bytes"], "parts": together["parts"]})
        rows.sort(key=lambda r: (-r["bytes"], r["unit"]))
        return rows


def document(att: Attribution, requires: dict[str, list[str]], model_needs: dict[str, set[tuple[str, str]]]) -> dict:
    m = Marginal(att, requires)
    ops = sorted((m.op(op) for op in m.kernels_of), key=lambda r: (-r["bytes"], r["op"]))
    models = sorted((m.model(name, model_needs) for name in model_needs), key=lambda r: (-r["bytes"], r["model"]))
    return {"ops": ops, "models": models, "shared_support": m.shared_support()}
