#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    from config.startup import database_check_for_command

    # Reads the settings first, so a setting that cannot be used is the line printed.
    database_check_for_command(sys.argv)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
