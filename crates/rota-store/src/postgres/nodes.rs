//! The fleet read at once: every node's record and every slot's holder.

use super::PostgresStore;
use crate::error::{Context, Result};
use crate::model::Fleet;
use crate::rows::{ALL_BACKOFFS_SQL, ALL_OPEN_REQUESTS_SQL, all_nodes_sql, slot_holder};

/// `Store::fleet`: four statements on one connection, whatever the fleet's size.
pub(super) async fn fleet(store: &PostgresStore) -> Result<Fleet> {
    let mut conn = store.connections.checkout("reading the fleet").await?;
    let nodes = sqlx::query(&all_nodes_sql())
        .fetch_all(&mut *conn)
        .await
        .context("reading nodes")?;
    let requests = sqlx::query(ALL_OPEN_REQUESTS_SQL)
        .fetch_all(&mut *conn)
        .await
        .context("reading requests")?;
    let backoffs = sqlx::query(ALL_BACKOFFS_SQL)
        .fetch_all(&mut *conn)
        .await
        .context("reading backoff")?;
    let slots = sqlx::query("SELECT slot, holder, acquired_at FROM slots ORDER BY slot")
        .fetch_all(&mut *conn)
        .await
        .context("reading slots")?;
    conn.finish();
    Ok(Fleet {
        nodes: crate::rows::overview(&nodes, &requests, &backoffs)?,
        slots: slots.iter().map(slot_holder).collect::<Result<_>>()?,
    })
}
