//! Tool input schemas as JSON text, written once per schema rather than once per request.
//!
//! A run's requests offer the same tools again and again (a tool's schema is shared by every
//! spec made from it: `maestro_tools::input::shared_input_schema`), and writing a schema's
//! `serde_json::Value` tree into each request body was a visible share of a busy worker's CPU.
//! The text of each schema is kept beside a weak reference to it, keyed by the schema's
//! address: the weak reference keeps the allocation (not the value) alive, so no other schema
//! can take that address while the entry exists, and an entry whose schema has been dropped is
//! found dead and written again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use serde_json::value::RawValue;

/// Entries kept before the dead ones are first swept out.
const SWEEP_AT: usize = 1024;

/// The texts by schema address, and the size at which the dead entries are next swept out
/// (twice what the last sweep left, so that many live schemas do not make every insert sweep).
#[derive(Default)]
struct Texts {
    by_address: HashMap<usize, (Weak<Value>, Arc<RawValue>)>,
    sweep_at: usize,
}

static TEXTS: Mutex<Option<Texts>> = Mutex::new(None);

/// `schema` as JSON text, written at most once while the schema lives.
pub(crate) fn schema_text(schema: &Arc<Value>) -> Result<Arc<RawValue>, serde_json::Error> {
    let key = Arc::as_ptr(schema) as usize;
    if let Ok(texts) = TEXTS.lock()
        && let Some((weak, text)) = texts.as_ref().and_then(|t| t.by_address.get(&key))
        && weak.strong_count() > 0
    {
        return Ok(Arc::clone(text));
    }
    let text: Arc<RawValue> = Arc::from(serde_json::value::to_raw_value(&**schema)?);
    if let Ok(mut texts) = TEXTS.lock() {
        let texts = texts.get_or_insert_with(Texts::default);
        if texts.by_address.len() >= texts.sweep_at.max(SWEEP_AT) {
            texts
                .by_address
                .retain(|_, (weak, _)| weak.strong_count() > 0);
            texts.sweep_at = texts.by_address.len() * 2;
        }
        texts
            .by_address
            .insert(key, (Arc::downgrade(schema), Arc::clone(&text)));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_is_written_once_and_reads_as_itself() {
        let schema =
            Arc::new(json!({"type": "object", "properties": {"path": {"type": "string"}}}));
        let first = schema_text(&schema).unwrap();
        assert_eq!(first.get(), serde_json::to_string(&*schema).unwrap());
        let again = schema_text(&Arc::clone(&schema)).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "the second request wrote the schema again"
        );
    }

    #[test]
    fn a_new_schema_never_gets_a_dropped_ones_text() {
        for i in 0..(SWEEP_AT + 10) {
            let schema = Arc::new(json!({"type": "object", "title": format!("tool {i}")}));
            let text = schema_text(&schema).unwrap();
            assert_eq!(text.get(), serde_json::to_string(&*schema).unwrap());
        }
        // The dead entries were swept as the table grew, instead of piling up.
        let kept = TEXTS
            .lock()
            .unwrap()
            .as_ref()
            .map_or(0, |t| t.by_address.len());
        assert!(
            kept <= SWEEP_AT,
            "{kept} entries kept for schemas long dropped"
        );
    }
}
