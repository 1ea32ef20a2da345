//! The configuration overlay written at runtime: versioned JSON documents, the newest of which
//! every node lays over its own file configuration. A write names the version it read (a
//! compare-and-set), so of two writers that read the same version one wins.

use sqlx::Any;

use crate::clock::from_ms;
use crate::error::{StoreError, StoreResult};
use crate::rows::{col, parse_json};
use crate::store::Store;

/// One stored version of the configuration overlay.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigVersion {
    /// Its version: 1 for the first overlay, one more for each write after.
    pub version: i64,
    /// The overlay: a JSON object in the configuration file's shape.
    pub doc: serde_json::Value,
    /// Who wrote it.
    pub updated_by: String,
    /// When it was written.
    pub updated_at: time::OffsetDateTime,
}

/// What a compare-and-set write of the overlay did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigPut {
    /// Written as this version.
    Written(i64),
    /// Nothing written: the newest version is no longer the one the writer read.
    Stale {
        /// The newest version now.
        current: i64,
    },
}

impl Store {
    /// The newest overlay version (0 when none was ever written): one cheap query, for
    /// watchers that poll.
    pub async fn config_version(&self) -> StoreResult<i64> {
        sqlx::query_scalar::<Any, i64>("SELECT COALESCE(MAX(version), 0) FROM config_versions")
            .fetch_one(&self.pool)
            .await
            .map_err(StoreError::query("read the configuration version"))
    }

    /// The newest overlay; `None` when none was ever written.
    pub async fn config_overlay(&self) -> StoreResult<Option<ConfigVersion>> {
        let row = sqlx::query::<Any>(
            "SELECT version, doc, updated_by, updated_at FROM config_versions \
             ORDER BY version DESC LIMIT 1",
        )
        .fetch_optional(&self.pool)
        .await
        .map_err(StoreError::query("read the configuration overlay"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(ConfigVersion {
            version: col(&row, "version")?,
            doc: parse_json(&col::<String>(&row, "doc")?, "configuration overlay")?,
            updated_by: col(&row, "updated_by")?,
            updated_at: from_ms(col(&row, "updated_at")?),
        }))
    }

    /// Writes `doc` as the next overlay version if the newest is still `expected` (0: none
    /// yet). The check and the write are one transaction, and the version is the primary key,
    /// so of any number of writers that read the same version exactly one writes.
    pub async fn put_config_overlay(
        &self,
        expected: i64,
        doc: &serde_json::Value,
        by: &str,
    ) -> StoreResult<ConfigPut> {
        let mut tx = self.begin_write().await?;
        let current =
            sqlx::query_scalar::<Any, i64>("SELECT COALESCE(MAX(version), 0) FROM config_versions")
                .fetch_one(&mut *tx)
                .await
                .map_err(StoreError::query("read the configuration version"))?;
        if current != expected {
            return Ok(ConfigPut::Stale { current });
        }
        let inserted = sqlx::query::<Any>(
            "INSERT INTO config_versions (version, doc, updated_by, updated_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (version) DO NOTHING",
        )
        .bind(expected + 1)
        .bind(doc.to_string())
        .bind(by.to_string())
        .bind(self.now_ms())
        .execute(&mut *tx)
        .await;
        let inserted = match inserted {
            Ok(done) => done.rows_affected(),
            Err(e) if crate::pieces::is_unique_violation(&e) => 0,
            Err(e) => return Err(StoreError::query("write the configuration overlay")(e)),
        };
        if inserted == 0 {
            drop(tx);
            return Ok(ConfigPut::Stale {
                current: self.config_version().await?,
            });
        }
        tx.commit()
            .await
            .map_err(StoreError::query("commit the configuration overlay"))?;
        Ok(ConfigPut::Written(expected + 1))
    }
}
