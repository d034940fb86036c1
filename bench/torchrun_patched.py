"""torch's own launcher (python3 -m torch.distributed.run) as the anchor of
bench_ddp.py. torch 1.13's Std.from_str iterates an IntFlag, which on
Python 3.11 no longer yields NONE or ALL, so `--redirects`/`--tee` default
"0" parses to None and the launcher fails; this wrapper fixes that one method
in memory (torch itself stays untouched) and runs torch's main."""
import sys

from torch.distributed.elastic.multiprocessing import api
from torch.distributed.run import main

api.Std.from_str = classmethod(lambda cls, vm: cls(int(vm)) if ":" not in vm else {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))})  # noqa: E501

if __name__ == "__main__":
    sys.argv[0] = "torchrun"
    main()
