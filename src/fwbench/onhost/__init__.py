"""Programs fwbench runs on a testbed host itself, as `python -m fwbench.onhost.X`
from the zip the ssh provider copies there: the standard library only (a real host
has no more), and no parent package that imports anything else."""
