"""The state store's schema: an ordered list of named migrations, applied once each at start-up.

To add tables, APPEND a `Migration` (never edit or reorder one that has shipped: stores in the
field have already applied it). A migration is applied inside one transaction together with the
record that it ran, so a crash leaves it either fully applied or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    name: str  # unique and stable: it is what the store records as applied
    sql: str  # one or more statements (executed with executescript-like splitting)


MIGRATIONS: list[Migration] = [
    Migration(
        "0001_files",
        """
        CREATE TABLE files (
            id TEXT PRIMARY KEY,
            seq INTEGER NOT NULL,            -- creation order, for listing
            filename TEXT NOT NULL,
            purpose TEXT NOT NULL,           -- batch | batch_output
            bytes INTEGER NOT NULL,
            created_at INTEGER NOT NULL,     -- unix seconds
            path TEXT NOT NULL               -- relative to the store's files dir
        );
        CREATE INDEX files_seq ON files (seq);
        """,
    ),
    Migration(
        "0002_batches",
        """
        CREATE TABLE batches (
            id TEXT PRIMARY KEY,
            seq INTEGER NOT NULL,            -- creation order, for listing and paging
            endpoint TEXT NOT NULL,
            input_file_id TEXT NOT NULL,
            completion_window TEXT NOT NULL,
            status TEXT NOT NULL,            -- validating in_progress finalizing completed failed expired cancelling cancelled
            created_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            in_progress_at INTEGER, finalizing_at INTEGER, completed_at INTEGER, failed_at INTEGER,
            expired_at INTEGER, cancelling_at INTEGER, cancelled_at INTEGER,
            output_file_id TEXT, error_file_id TEXT,
            errors TEXT,                     -- JSON list of {code, message, param, line}, or NULL
            metadata TEXT,                   -- JSON object, or NULL
            total INTEGER NOT NULL DEFAULT 0,
            completed INTEGER NOT NULL DEFAULT 0,
            failed INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX batches_seq ON batches (seq);
        CREATE INDEX batches_status ON batches (status);
        -- One row per finished input line: the primary key is what makes each line committed once.
        CREATE TABLE batch_results (
            batch_id TEXT NOT NULL,
            line INTEGER NOT NULL,           -- 1-based line number in the input file
            ok INTEGER NOT NULL,             -- 1: goes to the output file; 0: to the error file
            record TEXT NOT NULL,            -- the output line, JSON
            PRIMARY KEY (batch_id, line)
        );
        """,
    ),
    Migration(
        "0003_idempotency",
        """
        CREATE TABLE idempotency (
            scope TEXT NOT NULL,             -- a hash of the caller's API key ('' without one)
            key TEXT NOT NULL,               -- the Idempotency-Key header
            fingerprint TEXT NOT NULL,       -- sha256 of method, path and body
            state TEXT NOT NULL,             -- running | done
            status INTEGER,                  -- the stored response, once done
            headers TEXT,                    -- JSON list of [name, value]
            body BLOB,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            PRIMARY KEY (scope, key)
        );
        CREATE INDEX idempotency_expires ON idempotency (expires_at);
        """,
    ),
    Migration(
        "0004_receipts",
        """
        CREATE TABLE receipts (
            id TEXT PRIMARY KEY,             -- rcpt-<32 hex>, as returned in X-Trtserve-Receipt
            created_at REAL NOT NULL,        -- unix seconds the request was admitted
            model TEXT NOT NULL,
            fingerprint TEXT,                -- the engine manifest's hash
            body TEXT NOT NULL               -- the receipt, JSON (serve/receipts/model.py: Receipt)
        );
        CREATE INDEX receipts_created ON receipts (created_at);
        """,
    ),
    Migration(
        "0005_responses",
        """
        CREATE TABLE responses (
            id TEXT PRIMARY KEY,             -- resp_<32 hex>
            created_at REAL NOT NULL,        -- unix seconds
            status TEXT NOT NULL,            -- queued in_progress completed incomplete failed cancelled
            background INTEGER NOT NULL,     -- 1: created with background: true (only those can be cancelled)
            context TEXT NOT NULL,           -- JSON list of the conversation's input items up to this turn
            body TEXT NOT NULL               -- the response object, JSON (serve/responses/)
        );
        CREATE INDEX responses_created ON responses (created_at);
        """,
    ),
]
