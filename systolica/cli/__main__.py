"""``python -m systolica.cli``: the same as the ``systolica`` command."""

import sys

from systolica.cli import main

sys.exit(main())
