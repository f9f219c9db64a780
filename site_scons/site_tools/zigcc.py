"""SCons tool: zig's clang (from the `ziglang` PyPI package) as a hermetic C compiler,
with compile results kept in minibuild's action cache.

The compiler command comes from the plan (`zig_cc`); the generic `cc` tool gives
SCons' Object builder and C #include scanner, so header edits rebuild exactly
the objects that include them.

When SCons decides an object must be (re)built, the compile action first looks it
up in the action cache (minibuild/cache.py) under two keys, each the hash of the
compiler's version and the command line with this build's own folders written as
placeholders, and then: the bytes of the source and of every header SCons' #include
scan found for it (no preprocessor run: a warm build's fast path), or the preprocessed
source (every header the object reads, as the compiler sees it: exact, so a header
edit that changes nothing the object sees still hits).
A hit copies the verified object from the cache; a miss compiles and stores it. So a
second checkout, a second output folder, or a second workspace target that needs the
same object gets it without compiling. `cache_dir` None (MINIBUILD_NO_CACHE=1) turns
the cache off. With MINIBUILD_REMOTE_CACHE set, a local miss asks the remote cache
(minibuild/remote_cache.py) next, and a compiled object is uploaded to it.
"""

import os
import subprocess
import time

import SCons.Action
import SCons.Tool.cc


def _placeholders(args, roots):
    """The command with each of `roots` (absolute folders that differ between
    checkouts and output folders) written as a placeholder."""
    out = []
    for a in args:
        for name, root in roots:
            a = a.replace(root, name)
        out.append(a)
    return out


def _scanned_key(pre, target, source, env):
    """The compile's key from SCons' own #include scan, without running the
    preprocessor: the command (placeholders), the source's bytes and every header
    SCons found for it (recursively, in CPPPATH and beside the source; the scan ignores
    #if, so it over-includes, never under-includes), each by placeholder path and
    bytes. System headers (<stdint.h>, <arm_neon.h>) are zig's own, so the zig version
    covers them. None when the command adds a system include folder that is not zig's
    (the JDK's jni.h): then the key hashes the preprocessed source instead."""
    import hashlib
    from minibuild.cache import action_key
    roots = env.get("MRT_ROOTS", ())
    zig_dirs = [root for name, root in roots if name == "<zig>"]
    scanned = {str(env.Dir(d).abspath) for d in env.get("CPPPATH", [])}   # SCons scans these
    for i, a in enumerate(pre):
        if a.startswith("-I") and len(a) > 2 and os.path.abspath(a[2:]) in scanned:
            continue
        if a in ("-isystem", "-I", "-include", "-idirafter", "-iquote") and i + 1 < len(pre):
            if not any(pre[i + 1].startswith(z) for z in zig_dirs):
                return None
        elif a.startswith(("-I", "-include", "--include", "-idirafter", "-iquote", "-isystem")) and \
                a not in ("-I", "-include", "-isystem", "-idirafter", "-iquote"):
            return None   # a joined form (-I/dir) the plan never writes: play safe
    deps = {}
    for node in list(source) + list(target[0].implicit or []):
        path = str(node.abspath)
        if path.endswith(".o"):
            continue
        with open(path, "rb") as f:
            deps[_placeholders([path], roots)[0]] = hashlib.sha256(f.read()).hexdigest()
    return action_key("compile-scanned", env["ZIG_VERSION"], *_placeholders(pre, roots), "--files--",
                      *("%s=%s" % kv for kv in sorted(deps.items())))


def compile_object(target, source, env):
    """The compile action. Module-level, not a closure: SCons signs a function action
    by its code and closure, and the cache's location must not change what is built."""
    argv = [str(a) for a in env.subst_list("$CCCOM", target=target, source=source)[0]]
    out = str(target[0])
    part = out + ".part"
    argv[argv.index("-o") + 1] = part
    record = env.get("MRT_RECORD") or (lambda *a: None)
    cache = _cache(env.get("MRT_CACHE_DIR"))
    t0 = time.time()
    keys = []
    if cache is not None:
        from minibuild.cache import action_key
        pre = [a for i, a in enumerate(argv) if a not in ("-c", "-o") and not (i and argv[i - 1] == "-o")]
        # Two keys: the scanned one (no preprocessor run: the fast path of a warm
        # build), then the preprocessed one (exact: a header edit that changes nothing
        # this object sees, such as config.h for a kernel, still hits). A hit on the
        # second is stored under the first too.
        fast = _scanned_key(pre, target, source, env)
        hit = None
        if fast is not None:
            keys.append(fast)
            hit, where = _lookup(cache, fast, ["object"])
        if hit is None:
            proc = subprocess.run(pre + ["-E", "-P", "-o", "-"], capture_output=True, env=env["ENV"])
            if proc.returncode == 0:
                exact = action_key("compile", env["ZIG_VERSION"], *_placeholders(pre, env.get("MRT_ROOTS", ())),
                                   proc.stdout)
                keys.append(exact)
                hit, where = _lookup(cache, exact, ["object"])
                if hit is not None and fast is not None:
                    cache.put(fast, hit)
                    if _remote() is not None:
                        _remote().put(fast, hit)
        if hit is not None:
            with open(part, "wb") as f:
                f.write(hit["object"])
            os.replace(part, out)
            record("compile", out, t0, 0, where)
            return 0
    rc = subprocess.call(argv, env=env["ENV"])
    if rc == 0:
        os.replace(part, out)
        if keys:
            with open(out, "rb") as f:
                outputs = {"object": f.read()}
            for key in keys:
                cache.put(key, outputs)
                if _remote() is not None:
                    _remote().put(key, outputs)
    elif os.path.exists(part):
        os.remove(part)
    record("compile", out, t0, rc, "miss" if keys else "off")
    return rc


def _lookup(cache, key, names):
    """The outputs stored under `key` (local cache first, then the remote one, whose
    hit is copied into the local cache), with where they came from; (None, "miss")."""
    hit, where = cache.get(key), "hit-local"
    remote = _remote()
    if (hit is None or set(hit) != set(names)) and remote is not None:
        hit, where = remote.get(key), "hit-remote"
        if hit is not None and set(hit) == set(names):
            cache.put(key, hit)
    if hit is None or set(hit) != set(names):
        return None, "miss"
    return hit, where


def _to_placeholders(data, roots):
    for name, root in roots:
        data = data.replace(root.encode(), name.encode())
    return data


def _from_placeholders(data, roots):
    for name, root in roots:
        data = data.replace(name.encode(), root.encode())
    return data


def _linked_image(data):
    """Whether `data` is what a linker marks executable: an ELF executable or shared
    object, a Mach-O executable or dylib, or a fat file of them (not an object file,
    an archive or a map)."""
    if data[:4] == b"\x7fELF" and len(data) > 18:
        e_type = int.from_bytes(data[16:18], "little" if data[5] == 1 else "big")
        return e_type in (2, 3)
    if data[:4] in (b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe") and len(data) > 16:
        return int.from_bytes(data[12:16], "little") in (2, 6)
    return data[:4] == b"\xca\xfe\xba\xbe"


def _restore_mode(path, data):
    """A restored output gets the mode the step would have given it (umask applied)."""
    if _linked_image(data):
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(path, 0o777 & ~umask)


def run_step(kind, argv, inputs, parts, names, env, run, text_outputs=()):
    """A link, strip, stub or compiler_rt step as a cached action. `argv`: its command
    (outputs at their .part names); `inputs`: every file it reads besides the
    toolchain; `parts`: its outputs' .part names; `names`: the same outputs relative to
    the target's folder (their names in the cache entry); `run()` executes it and returns the
    exit code. The key is the hash of the step's kind, the zig and Python versions, the
    command with this build's folders as placeholders, and the bytes of every input.
    Outputs listed in `text_outputs` (indexes: linker maps, which name object paths)
    are stored with this build's folders as placeholders and written back with the
    current ones, so a map served from the cache equals one the link writes here.
    Returns (exit code, cache result)."""
    import hashlib
    import sys
    cache = _cache(env.get("MRT_CACHE_DIR"))
    if cache is None:
        return run(), "off"
    from minibuild.cache import action_key
    roots = list(env.get("MRT_ROOTS", ()))
    digests = []
    for path in inputs:
        with open(path, "rb") as f:
            digests.append(hashlib.sha256(f.read()).hexdigest())
    key = action_key("step", kind, env["ZIG_VERSION"], sys.version, *_placeholders(argv, roots), "--inputs--",
                     *digests)
    hit, where = _lookup(cache, key, names)
    if hit is not None:
        for i, (name, part) in enumerate(zip(names, parts)):
            data = hit[name]
            with open(part, "wb") as f:
                f.write(_from_placeholders(data, roots) if i in text_outputs else data)
            _restore_mode(part, data)
        return 0, where
    rc = run()
    if rc == 0 and all(os.path.exists(p) for p in parts):
        outputs = {}
        for i, (name, part) in enumerate(zip(names, parts)):
            with open(part, "rb") as f:
                data = f.read()
            outputs[name] = _to_placeholders(data, roots) if i in text_outputs else data
        cache.put(key, outputs)
        if _remote() is not None:
            _remote().put(key, outputs)
    return rc, "miss"


_CACHES = {}
_REMOTE = []


def _remote():
    """The remote cache of this SCons run (MINIBUILD_REMOTE_CACHE), made once."""
    if not _REMOTE:
        from minibuild.remote_cache import RemoteCache
        _REMOTE.append(RemoteCache.from_env())
    return _REMOTE[0]


def _cache(root):
    if not root:
        return None
    if root not in _CACHES:
        from minibuild.cache import LocalCache
        _CACHES[root] = LocalCache(root)
    return _CACHES[root]


def _show(target, source, env):
    """What SCons prints for a compile: CCCOMSTR (quiet mode) or the command itself."""
    return env.subst("$CCCOMSTR", target=target, source=source) or \
        env.subst("$CCCOM", target=target, source=source)


def generate(env, zig_cc=None, cache_dir=None, roots=(), zig_version="", record=None, **kw):
    SCons.Tool.cc.generate(env)
    env["CC"] = " ".join(zig_cc) if zig_cc else "zig cc"
    env["OBJSUFFIX"] = ".o"
    env["SHOBJSUFFIX"] = ".o"
    env["CFLAGS"] = []
    env["CCFLAGS"] = []
    env["CPPDEFINES"] = []
    # One command line for every object; flags are per object (size or speed).
    env["CCCOM"] = "$CC $CCFLAGS $_CPPDEFFLAGS $_CPPINCFLAGS -c -o $TARGET $SOURCES"
    # Not in the action's varlist: where the cache is, and how actions are logged,
    # change nothing about the object.
    env["ZIG_VERSION"] = zig_version
    env["MRT_CACHE_DIR"] = cache_dir
    env["MRT_ROOTS"] = list(roots)
    env["MRT_RECORD"] = record
    env["MRT_RUN_STEP"] = run_step
    action = SCons.Action.Action(compile_object, strfunction=_show,
                                 varlist=["CCCOM", "CC", "CCFLAGS", "_CPPDEFFLAGS", "_CPPINCFLAGS", "ZIG_VERSION"])
    static_obj, _ = SCons.Tool.createObjBuilders(env)
    static_obj.add_action(".c", action)


def exists(env):
    try:
        import ziglang  # noqa: F401
        return True
    except ImportError:
        return False
