#!/usr/bin/env python3
"""Where `meson install` puts the muster Python package for a prefix: the
first of the interpreter's own install directories that lies under PREFIX
and that it searches (sys.path, or the user's site directory), so that
--prefix=/usr/local, /usr and ~/.local each give a directory the same
python3 imports from without PYTHONPATH; else PREFIX/lib/pythonX.Y/site-packages
(posix_prefix), which PYTHONPATH then names.

    python_dir.py PREFIX"""
import os
import site
import sys
import sysconfig

prefix = os.path.normpath(sys.argv[1])
searched = {os.path.normpath(p) for p in sys.path if p}
searched.add(os.path.normpath(site.getusersitepackages()))
candidates = []
for scheme in sysconfig.get_scheme_names():
    try:
        candidates.append(sysconfig.get_path("platlib", scheme,
                                             vars={"base": prefix, "platbase": prefix}))
    except KeyError:
        pass
candidates.append(sysconfig.get_path("platlib"))  # the interpreter's own, last
for path in map(os.path.normpath, candidates):
    if path.startswith(prefix + os.sep) and path in searched:
        print(path)
        break
else:
    print(sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix}))
