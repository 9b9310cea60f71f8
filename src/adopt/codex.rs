//! Codex's `config.toml`: reading `[mcp_servers.*]`, and rewriting chosen entries with
//! `toml_edit` so comments, order and formatting elsewhere stay as they were.
//!
//! Owns: Codex's TOML. Never writes a file: it returns text, checked by reading it back
//! (as `jsonc.rs` does).

use super::jsonc::{apply, Entries};
use super::{AdoptError, Edit};
use serde_json::Value;
use std::path::Path;
use toml_edit::{Array, DocumentMut, Item, TableLike};

/// The 1-based line of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map_or(1, |t| t.matches('\n').count() + 1)
}

/// A TOML parse error on `path` as the plan reports it.
pub fn bad_toml(path: &Path, text: &str, e: &toml_edit::TomlError) -> AdoptError {
    AdoptError::BadFile {
        path: path.to_path_buf(),
        line: e.span().map(|s| line_of(text, s.start)),
        message: format!("not valid TOML: {}", e.message().trim_end()),
    }
}

/// The parsed file: the editable document and its plain value.
pub struct Doc {
    doc: DocumentMut,
    value: Value,
}

/// Parses `text`, the content of `path`.
pub fn parse(path: &Path, text: &str) -> Result<Doc, AdoptError> {
    let doc: DocumentMut = text.parse().map_err(|e| bad_toml(path, text, &e))?;
    let value = to_value(path, text)?;
    Ok(Doc { doc, value })
}

fn to_value(path: &Path, text: &str) -> Result<Value, AdoptError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| AdoptError::BadFile {
        path: path.to_path_buf(),
        line: e.span().map(|s| line_of(text, s.start)),
        message: format!("not valid TOML: {}", e.message().trim_end()),
    })?;
    serde_json::to_value(table).map_err(|e| AdoptError::BadFile {
        path: path.to_path_buf(),
        line: None,
        message: format!("cannot read its values: {e}"),
    })
}

fn table_at<'a>(
    doc: &'a DocumentMut,
    pointer: &[String],
) -> Result<Option<&'a dyn TableLike>, String> {
    let mut t: &dyn TableLike = doc.as_table();
    for key in pointer {
        let Some(item) = t.get(key) else {
            return Ok(None);
        };
        t = item
            .as_table_like()
            .ok_or_else(|| format!("`{}` is not a table", pointer.join(".")))?;
    }
    Ok(Some(t))
}

impl Doc {
    /// The entries of the table at `pointer`, in file order.
    pub fn entries(&self, pointer: &[String]) -> Entries {
        let t = match table_at(&self.doc, pointer) {
            Ok(Some(t)) => t,
            Ok(None) => return Entries::Missing,
            Err(why) => return Entries::Malformed(why),
        };
        let mut at = &self.value;
        for k in pointer {
            at = at.get(k).unwrap_or(&Value::Null);
        }
        Entries::Found(
            t.iter()
                .map(|(k, _)| (k.to_string(), at.get(k).cloned().unwrap_or(Value::Null)))
                .collect(),
        )
    }
}

/// `text` with each entry of `edits` rewritten as `jsonc::rewrite` does: `command` and `args`
/// set (keeping each value's surrounding whitespace and comment), `env` and `cwd` removed
/// (an `[mcp_servers.NAME.env]` table goes with its header), every other key kept.
pub fn rewrite(
    path: &Path,
    text: &str,
    edits: &[(Vec<String>, String, Edit)],
) -> Result<String, AdoptError> {
    let Doc { mut doc, value } = parse(path, text)?;
    let mut expected = value;
    let internal = |message: String| AdoptError::Internal {
        path: path.to_path_buf(),
        message,
    };
    for (pointer, key, edit) in edits {
        let mut parent: &mut dyn TableLike = doc.as_table_mut();
        for k in pointer {
            parent = parent
                .get_mut(k)
                .and_then(Item::as_table_like_mut)
                .ok_or_else(|| internal(format!("entry `{key}` not found")))?;
        }
        let (entry, rw) = match edit {
            Edit::Remove => {
                parent
                    .remove(key)
                    .ok_or_else(|| internal(format!("entry `{key}` not found")))?;
                apply(&mut expected, pointer, key, edit);
                continue;
            }
            Edit::Point(rw) => (key.as_str(), rw),
            Edit::PointAs(name, rw) => {
                // A table cannot be renamed in place: it moves, keeping its decoration.
                let item = parent
                    .remove(key)
                    .ok_or_else(|| internal(format!("entry `{key}` not found")))?;
                parent.insert(name, item);
                (name.as_str(), rw)
            }
        };
        let t = parent
            .get_mut(entry)
            .and_then(Item::as_table_like_mut)
            .ok_or_else(|| internal(format!("entry `{key}` not found")))?;
        set(t, "command", rw.command.as_str().into());
        let mut args = Array::new();
        for a in &rw.args {
            args.push(a.as_str());
        }
        set(t, "args", args.into());
        t.remove("env");
        t.remove("cwd");
        apply(&mut expected, pointer, key, edit);
    }
    let out = doc.to_string();
    if to_value(path, &out)? != expected {
        return Err(internal(
            "the edited file does not read back as intended".to_string(),
        ));
    }
    Ok(out)
}

/// Sets `key` to `value`, keeping the old value's decoration (spaces, a trailing comment).
fn set(t: &mut dyn TableLike, key: &str, mut value: toml_edit::Value) {
    match t.get_mut(key).and_then(Item::as_value_mut) {
        Some(old) => {
            *value.decor_mut() = old.decor().clone();
            *old = value;
        }
        None => {
            t.insert(key, Item::Value(value));
        }
    }
}
