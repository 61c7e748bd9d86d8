"""Command line: ``llmsched-gym run | scenarios | policies | compare | tune | traces |
calibrate`` (and ``train``, from the agents' plugin).

Every subcommand lives here, one module each: the layers below (the simulator, the
evaluation harness, the parameter search) take Python arguments and return results; the
parsing of flags, their validation under the flag's name (:mod:`.flags`), terminal tables
(:mod:`.tables`) and progress bars (:mod:`.progress`) are this package's. Bad input
(unknown names, negative values, unreadable files) prints one clear line and exits with
code 2 before any simulation starts.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module
from importlib.metadata import entry_points

from ..errors import ConfigError, PolicyError, one_line
from . import calibrate, compare, run, traces, tune

EXIT_BAD_INPUT = 2
#: The subcommand modules of the package, in the order ``--help`` lists them.
SUBCOMMANDS = (run, compare, tune, traces, calibrate)


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage block)."""

    def error(self, message):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``llmsched-gym`` parser: the package's subcommands, then those of the plugins
    (entry points of group ``llmsched_gym.commands``: ``train`` from agents/cli.py)."""
    parser = OneLineParser(prog="llmsched-gym", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_cli(sub)
    plugins = [ep.value for ep in entry_points(group="llmsched_gym.commands")] or ["agents.cli"]
    for module in plugins:
        import_module(module).add_cli(sub)
    for p in sub.choices.values():  # each flag's name by the field it sets, for its errors
        p.set_defaults(flag_names={a.dest: a.option_strings[0] for a in p._actions if a.option_strings})
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``llmsched-gym ARGV``; the exit code (2: bad input, one line on stderr)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, PolicyError) as e:
        print(f"llmsched-gym {args.command}: error: {one_line(str(e))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # output piped into `head` and the like (an OSError: caught first)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # a path the system refuses (too long, not a file): named, as any bad input
        print(f"llmsched-gym {args.command}: error: {one_line(f'{e.filename}: {e.strerror or e}')}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
