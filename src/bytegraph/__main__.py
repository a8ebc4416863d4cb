"""``python -m bytegraph <command>``: bytegraph's command line.

Commands:

* ``dropin enable|disable|status``: the drop-in switch's start-up hook (see ``bytegraph.dropin``);
* ``report DIR [-o report.html]``: a ``BYTEGRAPH_TRACE_DIR`` trace as one HTML page (``bytegraph.report``).

Example::

    python -m bytegraph dropin enable
"""

import sys


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "dropin":
        from .dropin import main as dropin_main
        return dropin_main(args[1:])
    if args and args[0] == "report":
        from .report import main as report_main
        return report_main(args[1:])
    print("usage: python -m bytegraph dropin [enable|disable|status]\n"
          "       python -m bytegraph report DIR [-o report.html]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
