"""``python -m swarmrl``: the ``swarmrl`` command, for interpreters without its script."""

from swarmrl._cli import main

raise SystemExit(main())
