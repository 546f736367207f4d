"""``python -m rl8lite train -f config.yaml``: the same as the ``rl8lite`` command."""

from .cli import main

raise SystemExit(main())
