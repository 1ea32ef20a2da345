//! The CSV an `arpeggio` step reads, parsed as TAKT parses it: a header row, then data rows;
//! `"` quotes a field (`""` is a quote inside one); `\n`, `\r\n` and a bare `\r` end a row; a
//! missing field is empty.

/// One data row: `(column, value)` in header order.
pub(crate) type Row = Vec<(String, String)>;

/// The data rows of `text`, or why there are none.
pub(crate) fn rows(text: &str) -> Result<Vec<Row>, String> {
    let parsed = parse(text);
    let Some((headers, data)) = parsed.split_first() else {
        return Err("the file is empty; it needs a header row and at least one data row".into());
    };
    if data.is_empty() {
        return Err("the file has a header row but no data rows".into());
    }
    Ok(data
        .iter()
        .map(|fields| {
            headers
                .iter()
                .enumerate()
                .map(|(i, h)| (h.clone(), fields.get(i).cloned().unwrap_or_default()))
                .collect()
        })
        .collect())
}

fn parse(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    field.push('"');
                } else {
                    quoted = false;
                }
            } else {
                field.push(c);
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => quoted = true,
            ',' => row.push(std::mem::take(&mut field)),
            '\r' | '\n' => {
                if c == '\r' && chars.peek() == Some(&'\n') {
                    chars.next();
                }
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            _ => field.push(c),
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn quoted_fields_keep_commas_quotes_and_newlines() {
        let rows = rows("name,note\r\n\"Smith, J\",\"said \"\"hi\"\"\nthen left\"\nDoe\n").unwrap();
        assert_eq!(
            rows,
            vec![
                vec![
                    ("name".to_string(), "Smith, J".to_string()),
                    ("note".to_string(), "said \"hi\"\nthen left".to_string()),
                ],
                vec![
                    ("name".to_string(), "Doe".to_string()),
                    ("note".to_string(), String::new()),
                ],
            ]
        );
    }

    #[test]
    fn a_header_without_data_is_an_error() {
        assert!(rows("a,b\n").unwrap_err().contains("no data rows"));
        assert!(rows("").unwrap_err().contains("empty"));
    }
}
