"""SCons tool: zig's clang (from the `ziglang` PyPI package) as a hermetic C compiler.

The compiler command comes from the plan (`zig_cc`); the generic `cc` tool gives
SCons' Object builder and C #include scanner, so header edits rebuild exactly
the objects that include them.
"""

import SCons.Tool.cc


def generate(env, zig_cc=None, **kw):
    SCons.Tool.cc.generate(env)
    env["CC"] = " ".join(zig_cc) if zig_cc else "zig cc"
    env["OBJSUFFIX"] = ".o"
    env["SHOBJSUFFIX"] = ".o"
    env["CFLAGS"] = []
    env["CCFLAGS"] = []
    env["CPPDEFINES"] = []
    # One command line for every object; flags are per object (size or speed).
    env["CCCOM"] = "$CC $CCFLAGS $_CPPDEFFLAGS $_CPPINCFLAGS -c -o $TARGET $SOURCES"


def exists(env):
    try:
        import ziglang  # noqa: F401
        return True
    except ImportError:
        return False
