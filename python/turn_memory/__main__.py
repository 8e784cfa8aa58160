from turn_memory.cli import main

raise SystemExit(main())
