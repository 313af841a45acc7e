"""``flush`` for the test suite: on PostgreSQL, every table emptied by ``DELETE``, not ``TRUNCATE``.

pytest-django ends every ``django_db(transaction=True)`` test with Django's ``flush``, which on
PostgreSQL is one ``TRUNCATE`` of every table: a new file for each table and index, synced at
commit, about a second on these machines for a test that wrote a handful of rows (measured: 1.0 s
for the 31 tables against 15 ms for a ``DELETE`` of each). A ``DELETE`` in one transaction
empties them as well: Django creates PostgreSQL's foreign keys ``DEFERRABLE INITIALLY
DEFERRED``, so they are checked at the commit, when every row is gone; sequences are left as
``TRUNCATE`` without ``RESTART IDENTITY`` leaves them. Then, as Django's does, ``post_migrate``
makes the content types and permissions again. Any other database, or a flush asked to reset
sequences, is Django's own.
"""

from __future__ import annotations

from django.core.management.commands.flush import Command as DjangoFlush
from django.core.management.sql import emit_post_migrate_signal
from django.db import connections


class Command(DjangoFlush):
    def handle(self, **options):
        database = options["database"]
        connection = connections[database]
        if connection.vendor != "postgresql" or options.get("reset_sequences", True):
            return super().handle(**options)
        if options["interactive"]:
            return super().handle(**options)  # asks first, as Django's does
        quote = connection.ops.quote_name
        tables = connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        statements = [f"DELETE FROM {quote(table)}" for table in sorted(tables)]
        connection.ops.execute_sql_flush(statements)  # in one transaction
        if statements and not options.get("inhibit_post_migrate", False):
            emit_post_migrate_signal(options["verbosity"], False, database)
