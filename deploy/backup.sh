#!/bin/sh
# Back up Toolcore's events and assets: the database first, then the files of DATA_DIR.
#
#   deploy/backup.sh DEST
#
# Reads DATABASE_URL and DATA_DIR as the servers have them (e.g. `set -a; . /etc/toolcore/
# toolcore.env; set +a`). DEST must be empty or missing; it receives
#   database.dump     pg_dump --format=custom (PostgreSQL), or
#   database.sqlite3  an online copy made with SQLite's backup API (the embedded default),
#   data.tar          DATA_DIR without index/ and static/ (rebuilt by themselves) and without
#                     the SQLite database files.
#
# Why this order (docs/deployment.md, "Backup and restore"): a file is written and flushed
# before the transaction that names it commits, and is never changed afterwards; so every file
# the database snapshot names already exists when the copy of the files starts. Files newer than
# the snapshot are copied too: after a restore they belong to no settlement, and
# `manage.py purge_orphans` removes them once recovery has moved on. Do not run `manage.py purge`
# (or delete conversations) while a backup runs: a file deleted between the two steps would be
# named by the snapshot and missing from the copy.
set -eu

usage() { echo "usage: $0 DEST (with DATABASE_URL and DATA_DIR set)" >&2; exit 2; }
[ $# -eq 1 ] || usage
dest=$1
data=${DATA_DIR:-}
[ -n "$data" ] || { echo "DATA_DIR: must be set to the servers' DATA_DIR" >&2; exit 2; }
[ -d "$data" ] || { echo "DATA_DIR: $data is not a directory" >&2; exit 1; }
mkdir -p "$dest"
if [ -n "$(ls -A "$dest")" ]; then
  echo "$dest: not empty; a backup goes to a new folder" >&2
  exit 1
fi

# 1. The database: one consistent snapshot.
url=${DATABASE_URL:-}
case "$url" in
  postgres://*|postgresql://*)
    pg_dump --format=custom --no-owner --no-acl --file="$dest/database.dump" "$url"
    ;;
  sqlite://*|"")
    if [ -z "$url" ]; then
      source_db="$data/toolcore.sqlite3"
    else
      source_db=${url#sqlite://}
      source_db=${source_db#/}   # sqlite:///relative, sqlite:////absolute
    fi
    [ -f "$source_db" ] || { echo "SQLite database $source_db not found" >&2; exit 1; }
    "${PYTHON:-python3}" - "$source_db" "$dest/database.sqlite3" <<'PY'
import sqlite3
import sys

source = sqlite3.connect(sys.argv[1], timeout=20)
target = sqlite3.connect(sys.argv[2])
with target:
    source.backup(target)  # a consistent copy while the servers keep writing
target.close()
source.close()
PY
    ;;
  *)
    echo "DATABASE_URL: only postgres:// and sqlite:// are supported" >&2
    exit 2
    ;;
esac

# 2. Then the files. GNU tar exits 1 when a file changed while it was read: a capture still
# being written, which the snapshot names in no asset. Anything worse stops the backup.
status=0
tar -C "$data" --exclude=./index --exclude=./static \
    --exclude='./toolcore.sqlite3*' --exclude='./test-toolcore-*' \
    -cf "$dest/data.tar" . || status=$?
if [ "$status" -gt 1 ]; then
  echo "tar failed ($status): the backup in $dest is incomplete" >&2
  exit "$status"
fi
echo "backup done: $dest"
