from fwbench.cli import main

raise SystemExit(main())
