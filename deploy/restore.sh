#!/bin/sh
# Restore a backup made by deploy/backup.sh into an empty database and an empty DATA_DIR.
#
#   deploy/restore.sh BACKUP
#
# With every Toolcore process stopped. DATABASE_URL names the database to fill: for
# PostgreSQL an existing, empty database (`createdb -O toolcore toolcore`); for SQLite a file
# that does not exist yet. DATA_DIR must be empty or missing. Then, before starting the
# servers: `python manage.py migrate` (a backup of an older release), `python manage.py
# check_integrity` (docs/reliability.md), and after the workers have swept once,
# `python manage.py purge_orphans` (docs/deployment.md, "Backup and restore").
set -eu

usage() { echo "usage: $0 BACKUP (with DATABASE_URL and DATA_DIR set)" >&2; exit 2; }
[ $# -eq 1 ] || usage
backup=$1
data=${DATA_DIR:-}
[ -n "$data" ] || { echo "DATA_DIR: must be set" >&2; exit 2; }
[ -f "$backup/data.tar" ] || { echo "$backup: no data.tar, not a backup" >&2; exit 1; }
mkdir -p "$data"
if [ -n "$(ls -A "$data")" ]; then
  echo "DATA_DIR: $data is not empty; restore into an empty folder" >&2
  exit 1
fi

url=${DATABASE_URL:-}
case "$url" in
  postgres://*|postgresql://*)
    [ -f "$backup/database.dump" ] || { echo "$backup: no database.dump" >&2; exit 1; }
    tables=$(psql "$url" -Atc "select count(*) from pg_tables where schemaname = 'public'")
    if [ "$tables" != "0" ]; then
      echo "DATABASE_URL: the database has $tables tables; restore into an empty one" >&2
      exit 1
    fi
    pg_restore --no-owner --no-acl --exit-on-error --dbname="$url" "$backup/database.dump"
    ;;
  sqlite://*|"")
    [ -f "$backup/database.sqlite3" ] || { echo "$backup: no database.sqlite3" >&2; exit 1; }
    if [ -z "$url" ]; then
      target_db="$data/toolcore.sqlite3"
    else
      target_db=${url#sqlite://}
      target_db=${target_db#/}
    fi
    [ ! -e "$target_db" ] || { echo "$target_db exists; restore into a new file" >&2; exit 1; }
    cp "$backup/database.sqlite3" "$target_db"
    ;;
  *)
    echo "DATABASE_URL: only postgres:// and sqlite:// are supported" >&2
    exit 2
    ;;
esac

tar -C "$data" -xf "$backup/data.tar"
echo "restore done: now migrate, check_integrity, start the servers, then purge_orphans"
