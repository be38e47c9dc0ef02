"""`python -m nodemap.fleet ...`: the fleet check until `nodemap check`
(issue 14) is on main and takes --fleet; same options."""

import argparse
import sys

from ..errors import NodemapError
from . import command


def main() -> int:
    p = argparse.ArgumentParser(prog="nodemap check --fleet", description=command.FLEET_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--level", choices=("quick", "full"), default="quick")
    p.add_argument("--output", "-o", metavar="DIR")
    p.add_argument("--expect", metavar="FILE")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", "-q", action="store_true")
    command.add_arguments(p)
    args = p.parse_args()
    try:
        return command.run(args)
    except NodemapError as e:
        print(f"nodemap check: error: {e}", file=sys.stderr)
        return e.exit_code


sys.exit(main())
