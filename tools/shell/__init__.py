"""Shell command lines read as the shell reads them (tree-sitter's bash grammar), for the
permission port: the simple commands a line runs, and whether it is plain."""

from .parse import CommandLine, SimpleCommand, parse_command
from .runners import is_runner
from .words import Word

__all__ = ["CommandLine", "SimpleCommand", "Word", "is_runner", "parse_command"]
