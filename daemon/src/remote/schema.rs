//! The remote schema, created and migrated by agentd: numbered migrations
//! recorded in `schema_version`, applied under a PostgreSQL advisory lock so
//! two daemons starting at once never race; then revisions (changes older
//! agentds work with) recorded in `schema_revision`.

use tokio_postgres::Client;

use super::RemoteError;

/// The advisory lock key ("agentx" in ASCII).
const LOCK_KEY: i64 = 0x6167_656e_7478;

/// (version, SQL), in order. Never edit a released one: add the next.
const MIGRATIONS: &[(i32, &str)] = &[
    (
        1,
        "CREATE TABLE conversations (
        id text PRIMARY KEY,
        project text NOT NULL,
        agent text NOT NULL,
        title text NOT NULL DEFAULT '',
        machine text NOT NULL,
        folder text NOT NULL DEFAULT '',
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        turns integer NOT NULL DEFAULT 0,
        records bigint NOT NULL DEFAULT 0,
        rollbacks bigint NOT NULL DEFAULT 0,
        response_id text,
        usage jsonb NOT NULL DEFAULT '{}',
        checkpoints jsonb NOT NULL DEFAULT '[]',
        forked_from jsonb
    );
    CREATE INDEX conversations_listing ON conversations (project, agent, updated_at DESC);
    CREATE TABLE records (
        conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        seq bigint NOT NULL,
        at timestamptz,
        item jsonb NOT NULL,
        machine text NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    );",
    ),
    (
        2,
        // Full-text search: what was said and tool outputs, and
        // titles; 'simple' (no stemming), as the local index.
        "ALTER TABLE records ADD COLUMN search tsvector GENERATED ALWAYS AS (
            to_tsvector('simple'::regconfig,
                coalesce(item->>'text', '') || ' ' || coalesce(item->>'arguments', '')
                || ' ' || coalesce(item->>'output', ''))
        ) STORED;
        CREATE INDEX records_search ON records USING gin (search);
        ALTER TABLE conversations ADD COLUMN title_search tsvector GENERATED ALWAYS AS (
            to_tsvector('simple'::regconfig, title)
        ) STORED;
        CREATE INDEX conversations_title_search ON conversations USING gin (title_search);",
    ),
    (
        3,
        // Lines identified by content: each record carries the
        // hash of the line up to it, the row the hash of its whole line. A
        // migration, not a revision: an older agentd would push without
        // them and slip past the check that keeps lines from interleaving.
        "ALTER TABLE records ADD COLUMN chain text;
        ALTER TABLE conversations ADD COLUMN head text;",
    ),
];

/// The newest schema this agentd knows.
pub const LATEST: i32 = 3;

/// How many characters of a record (and of a title) are indexed for search.
/// PostgreSQL refuses a `tsvector` past 1 MB (lexemes and positions), which a
/// legal message of ~700 KB of varied words reaches; 100,000 characters stay
/// well below it whatever the words (a few bytes a character at worst).
pub const INDEXED_CHARS: i32 = 100_000;

/// Revisions: changes to the newest version that an agentd knowing only that
/// version works with unchanged (it reads and writes the same columns). They
/// are recorded in `schema_revision`, apart from `schema_version`, because an
/// agentd refuses a database whose `schema_version` is newer than it knows: a
/// fix recorded there would lock every older agentd out. Never edit one: add
/// the next. A change older agentds cannot work with is a migration.
const REVISIONS: &[(i32, &str)] = &[(
    1,
    // Index a bounded prefix of each record and title: one
    // large message made every push of its conversation fail.
    "ALTER TABLE records DROP COLUMN search;
    ALTER TABLE records ADD COLUMN search tsvector GENERATED ALWAYS AS (
        to_tsvector('simple'::regconfig, left(
            coalesce(item->>'text', '') || ' ' || coalesce(item->>'arguments', '')
            || ' ' || coalesce(item->>'output', ''), 100000))
    ) STORED;
    CREATE INDEX records_search ON records USING gin (search);
    ALTER TABLE conversations DROP COLUMN title_search;
    ALTER TABLE conversations ADD COLUMN title_search tsvector GENERATED ALWAYS AS (
        to_tsvector('simple'::regconfig, left(title, 100000))
    ) STORED;
    CREATE INDEX conversations_title_search ON conversations USING gin (title_search);",
)];

/// Brings the server's schema up to [`LATEST`].
pub async fn migrate(client: &mut Client) -> Result<(), RemoteError> {
    client
        .batch_execute(&format!("SELECT pg_advisory_lock({LOCK_KEY})"))
        .await
        .map_err(RemoteError::db)?;
    let result = apply(client).await;
    let unlocked = client
        .batch_execute(&format!("SELECT pg_advisory_unlock({LOCK_KEY})"))
        .await
        .map_err(RemoteError::db);
    result.and(unlocked)
}

/// Whether the server's schema is still one this agentd knows: another
/// agentd may have migrated it since this connection was made.
/// One cheap query; [`RemoteError::Config`] when it is newer.
pub async fn check(client: &Client) -> Result<(), RemoteError> {
    let current: i32 = client
        .query_one("SELECT coalesce(max(version), 0) FROM schema_version", &[])
        .await
        .map_err(RemoteError::db)?
        .try_get(0)
        .map_err(RemoteError::db)?;
    if current > LATEST {
        return Err(too_new(current));
    }
    Ok(())
}

fn too_new(current: i32) -> RemoteError {
    RemoteError::Config(format!(
        "the remote's schema is version {current}, newer than this agentd knows ({LATEST}); update agentx"
    ))
}

async fn apply(client: &mut Client) -> Result<(), RemoteError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_version (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(RemoteError::db)?;
    let current: i32 = client
        .query_one("SELECT coalesce(max(version), 0) FROM schema_version", &[])
        .await
        .map_err(RemoteError::db)?
        .try_get(0)
        .map_err(RemoteError::db)?;
    if current > LATEST {
        return Err(too_new(current));
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
        let tx = client.transaction().await.map_err(RemoteError::db)?;
        tx.batch_execute(sql).await.map_err(RemoteError::db)?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[version],
        )
        .await
        .map_err(RemoteError::db)?;
        tx.commit().await.map_err(RemoteError::db)?;
        tracing::info!(version, "remote schema migrated");
    }
    revise(client).await
}

/// Applies the [`REVISIONS`] not applied yet (after the migrations, under
/// the same lock). A database revised further by a newer agentd is fine.
async fn revise(client: &mut Client) -> Result<(), RemoteError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_revision (
                revision integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(RemoteError::db)?;
    let current: i32 = client
        .query_one(
            "SELECT coalesce(max(revision), 0) FROM schema_revision",
            &[],
        )
        .await
        .map_err(RemoteError::db)?
        .try_get(0)
        .map_err(RemoteError::db)?;
    for (revision, sql) in REVISIONS.iter().filter(|(r, _)| *r > current) {
        let tx = client.transaction().await.map_err(RemoteError::db)?;
        tx.batch_execute(sql).await.map_err(RemoteError::db)?;
        tx.execute(
            "INSERT INTO schema_revision (revision) VALUES ($1)",
            &[revision],
        )
        .await
        .map_err(RemoteError::db)?;
        tx.commit().await.map_err(RemoteError::db)?;
        tracing::info!(revision, "remote schema revised");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_indexed_prefix_is_the_one_documented() {
        let bound = format!("{INDEXED_CHARS})");
        let sql = REVISIONS[0].1;
        assert_eq!(sql.matches(&bound).count(), 2, "{sql}");
        // Numbered from 1, in order.
        for (n, (revision, _)) in REVISIONS.iter().enumerate() {
            assert_eq!(usize::try_from(*revision).unwrap(), n + 1);
        }
    }
}
