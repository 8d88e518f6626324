from stitch_lsp.worker.main import main

raise SystemExit(main())
