//! Reading columns: a value the row cannot give is reported as a corrupt row, by column name.

use sqlx::any::AnyRow;
use sqlx::{Any, Row};

use crate::error::{StoreError, StoreResult};
use crate::model::JobId;
use crate::store::{Backend, Marks};

pub(crate) fn col<'r, T: sqlx::Decode<'r, Any> + sqlx::Type<Any>>(
    row: &'r AnyRow,
    name: &str,
) -> StoreResult<T> {
    row.try_get(name).map_err(|e| StoreError::Corrupt {
        what: format!("column `{name}`: {e}"),
    })
}

pub(crate) fn parse_id(text: &str) -> StoreResult<JobId> {
    text.parse().map_err(|_| StoreError::Corrupt {
        what: format!("job id `{text}` is not a UUID"),
    })
}

pub(crate) fn parse_json(text: &str, what: &str) -> StoreResult<serde_json::Value> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        what: format!("{what} is not JSON: {e}"),
    })
}

/// The distinct values of the first column that the query finds among `values`, asked 500 at
/// a time. `select` writes the query up to where the list goes (`… WHERE name IN`), taking a
/// placeholder from the [`Marks`] for each of `fixed`, which are bound first.
pub(crate) async fn distinct_among(
    pool: &sqlx::AnyPool,
    backend: Backend,
    select: impl Fn(&mut Marks) -> String,
    fixed: &[String],
    values: &[String],
    what: &'static str,
) -> StoreResult<std::collections::HashSet<String>> {
    let mut found = std::collections::HashSet::new();
    for chunk in values.chunks(500) {
        let mut marks = Marks::new(backend);
        let head = select(&mut marks);
        let sql = format!("{head} ({})", marks.list(chunk.len()));
        let mut query = sqlx::query::<Any>(sqlx::AssertSqlSafe(sql));
        for value in fixed.iter().chain(chunk) {
            query = query.bind(value.clone());
        }
        for row in query
            .fetch_all(pool)
            .await
            .map_err(StoreError::query(what))?
        {
            found.insert(
                row.try_get::<String, _>(0)
                    .map_err(StoreError::query(what))?,
            );
        }
    }
    Ok(found)
}
