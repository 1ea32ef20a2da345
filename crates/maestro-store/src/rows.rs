//! Reading columns: a value the row cannot give is reported as a corrupt row, by column name.

use sqlx::any::AnyRow;
use sqlx::{Any, Row};

use crate::error::{StoreError, StoreResult};
use crate::model::JobId;

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
