//! Every write of a node's record: read it inside the write's transaction (`BEGIN
//! IMMEDIATE` holds SQLite's one write lock, so what is read stays current until the commit),
//! let rota-core decide ([`NodeOverview::apply`]), and persist what changed. Each statement is a
//! round trip to SQLite's own thread, so a write reads in one and writes no more than it must.

use rota_core::{Applied, Write};
use sqlx::{Sqlite, SqliteConnection};

use crate::error::{Context, Result};
use crate::model::{Millis, NodeOverview, RequestRecord, Writer};
use crate::rows::request_record;
use crate::sql::{Changes, Sql, UPDATE_NODE, change_sql};

/// `Store::write` after the fence's proof: reads the node's record, lets rota-core decide
/// ([`Sql::decide`]), and persists what changed; a refused write writes nothing. With the
/// answer, whether it wakes a waiter ([`Write::wakes`]).
pub(super) async fn write(
    tx: &mut SqliteConnection,
    writer: Writer<'_>,
    write: &Write,
) -> Result<(crate::Written, bool)> {
    let (read, applied) = Sql::<Sqlite>::decide(tx, writer, write).await?;
    let opened = persist(tx, &read.record, &applied, read.now).await?;
    let wakes = write.wakes(&applied);
    let written = Sql::<Sqlite>::written(tx, writer.node(), write, applied, opened).await?;
    Ok((written, wakes))
}

/// Writes what changed between `before` and the core's answer.
async fn persist(
    tx: &mut SqliteConnection,
    before: &NodeOverview,
    applied: &Applied,
    now: Millis,
) -> Result<Vec<RequestRecord>> {
    let node = &before.record.node;
    let after = &applied.after;
    if after.record != before.record {
        Sql::<Sqlite>::bind_row(sqlx::query(UPDATE_NODE), &after.record)
            .execute(&mut *tx)
            .await
            .context("updating the node")?;
    }
    if before.record.slot.is_some() && after.record.slot.is_none() {
        sqlx::query("DELETE FROM slots WHERE holder = ?")
            .bind(node.as_str())
            .execute(&mut *tx)
            .await
            .context("releasing the slot")?;
    }
    let changes = Changes::of(before, applied, now);
    let [moved, cleared, set, history, opened] = change_sql::<Sqlite>(["$2"; 5], ["TRUE"; 5]);
    let json = [
        &changes.moved,
        &changes.cleared,
        &changes.backoffs,
        &changes.history,
    ];
    for (sql, json) in [moved, cleared, set, history].iter().zip(json) {
        if json != "[]" {
            let query = sqlx::query(sql).bind(node.as_str()).bind(json);
            query
                .execute(&mut *tx)
                .await
                .context("writing the node's record")?;
        }
    }
    if changes.opened == "[]" {
        return Ok(Vec::new());
    }
    let opened = sqlx::query(&opened)
        .bind(node.as_str())
        .bind(&changes.opened)
        .fetch_all(&mut *tx)
        .await
        .context("recording a request")?;
    let opened = opened.iter().map(request_record).collect::<Result<_>>()?;
    Ok(opened)
}
