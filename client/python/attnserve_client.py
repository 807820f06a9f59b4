#!/usr/bin/env python3
"""The Python client's command line, run from a checkout without installing anything:
`/usr/bin/python3 client/python/attnserve_client.py generate --prompt="In the beginning"`
is `attnserve generate --prompt=...` of the installed package (README.md here). The
package beside this file is imported, and this module is that package's attnserve.cli
(imported as attnserve_client, it is the same module object, so setting its globals, as
tests/e2e/held_turn.py does, sets the command line's)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attnserve import cli  # noqa: E402

if __name__ == "__main__":
    sys.exit(cli.main())
sys.modules[__name__] = cli
