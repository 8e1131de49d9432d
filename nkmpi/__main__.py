"""The `nkmpi` command (and `python -m nkmpi`).

For `nkmpi run` the stop signals are caught before anything heavy is
imported: a job preempted in its first second still ends with status 3.
"""

import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if next((a for a in argv if not a.startswith("-")), None) == "run":
        from .stop import catch_stop_signals
        catch_stop_signals()
    from .cli import main as cli_main
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
