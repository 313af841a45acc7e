"""Shell command lines read as the shell reads them (tree-sitter's bash grammar), for the
permission port: the simple commands a line runs, and whether it is plain."""

from .parse import (
    MAX_PARSE_WORK_BYTES,
    CommandLine,
    ParseWork,
    SimpleCommand,
    parse_command,
    parse_work,
)
from .runners import is_runner
from .words import Word

__all__ = [
    "MAX_PARSE_WORK_BYTES",
    "CommandLine",
    "ParseWork",
    "SimpleCommand",
    "Word",
    "is_runner",
    "parse_command",
    "parse_work",
]
