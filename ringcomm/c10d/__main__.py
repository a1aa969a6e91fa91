"""python -m ringcomm.c10d: build the torch.distributed backend now, showing the compiler."""

from ringcomm.c10d._build import main

main()
