from campaign.cli import main

raise SystemExit(main())
