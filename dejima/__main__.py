from dejima.cli.launch import main

raise SystemExit(main())
