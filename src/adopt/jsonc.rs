//! JSON and JSONC client files: reading the servers objects, and rewriting chosen entries
//! while every other byte of the file stays as it was (comments, trailing commas, order,
//! indentation, line endings, a BOM).
//!
//! Owns: the `jsonc-parser` concrete syntax tree. Never writes a file: it returns text.
//! Every rewrite is checked by parsing the result again and comparing it with the original
//! document plus the intended change; any other difference is an error and nothing is written.

use super::{AdoptError, Edit};
use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};
use jsonc_parser::ParseOptions;
use serde_json::Value;
use std::path::Path;

/// What a servers object holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Entries {
    /// The key is absent (or the file empty): no servers.
    Missing,
    /// The key holds something other than an object; the reason is shown in the plan.
    Malformed(String),
    /// Keys and values in file order.
    Found(Vec<(String, Value)>),
}

/// Comments and trailing commas are accepted (VS Code's files are JSONC; the strict-JSON
/// clients never write them, and a file that has them is kept as it is). JSON5 extensions
/// that no client documents are refused.
fn options() -> ParseOptions {
    ParseOptions {
        allow_comments: true,
        allow_loose_object_property_names: false,
        allow_trailing_commas: true,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    }
}

const BOM: &str = "\u{feff}";

/// The parsed file; the tree must live as long as any node taken from it.
pub struct Doc {
    root: CstRootNode,
    bom: bool,
}

/// Parses `text` (the content of `path`, named in errors with the line).
pub fn parse(path: &Path, text: &str) -> Result<Doc, AdoptError> {
    let (bom, body) = match text.strip_prefix(BOM) {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let root = CstRootNode::parse(body, &options()).map_err(|e| AdoptError::BadFile {
        path: path.to_path_buf(),
        line: Some(e.line_display()),
        message: format!("not valid JSON: {}", e.kind()),
    })?;
    if root.value().is_some() && root.object_value().is_none() {
        return Err(AdoptError::BadFile {
            path: path.to_path_buf(),
            line: None,
            message: "not a JSON object at the top level".to_string(),
        });
    }
    Ok(Doc { root, bom })
}

impl Doc {
    /// The object at `pointer` (keys from the top), if every step is an object.
    fn object_at(&self, pointer: &[String]) -> Result<Option<CstObject>, String> {
        let Some(mut obj) = self.root.object_value() else {
            return Ok(None);
        };
        for (i, key) in pointer.iter().enumerate() {
            let Some(prop) = obj.get(key) else {
                return Ok(None);
            };
            match prop.object_value() {
                Some(o) => obj = o,
                None => {
                    let at: Vec<&str> = pointer.iter().take(i + 1).map(String::as_str).collect();
                    return Err(format!("`{}` is not an object", at.join(".")));
                }
            }
        }
        Ok(Some(obj))
    }

    /// The entries of the servers object at `pointer`, in file order.
    pub fn entries(&self, pointer: &[String]) -> Entries {
        let obj = match self.object_at(pointer) {
            Ok(Some(o)) => o,
            Ok(None) => return Entries::Missing,
            Err(why) => return Entries::Malformed(why),
        };
        let mut out = Vec::new();
        for prop in obj.properties() {
            let Some(name) = prop.decoded_name() else {
                continue;
            };
            let value = prop
                .value()
                .and_then(|v| v.to_serde_value())
                .unwrap_or(Value::Null);
            out.push((name, value));
        }
        Entries::Found(out)
    }

    /// The whole document as a value (for the check after a rewrite).
    fn value(&self) -> Value {
        self.root
            .value()
            .and_then(|v| v.to_serde_value())
            .unwrap_or(Value::Null)
    }

    fn text(&self) -> String {
        let body = self.root.to_string();
        if self.bom {
            format!("{BOM}{body}")
        } else {
            body
        }
    }
}

/// `text` with each entry `(pointer, key)` of `edits` changed: [`Edit::Point`] rewrites it to
/// run its [`Rewrite`] (`command` and `args` replaced, `args` added after `command` if
/// absent; `env`, `envFile` and `cwd` removed; every other key kept), [`Edit::PointAs`] also
/// renames its key, [`Edit::Remove`] removes it with its comma. Every byte outside these
/// entries is kept.
pub fn rewrite(
    path: &Path,
    text: &str,
    edits: &[(Vec<String>, String, Edit)],
) -> Result<String, AdoptError> {
    let doc = parse(path, text)?;
    let mut expected = doc.value();
    let internal = |message: String| AdoptError::Internal {
        path: path.to_path_buf(),
        message,
    };
    for (pointer, key, edit) in edits {
        let prop = doc
            .object_at(pointer)
            .ok()
            .flatten()
            .and_then(|o| o.get(key))
            .ok_or_else(|| internal(format!("entry `{key}` not found")))?;
        let rw = match edit {
            Edit::Remove => {
                prop.remove();
                apply(&mut expected, pointer, key, edit);
                continue;
            }
            Edit::Point(rw) => rw,
            Edit::PointAs(name, rw) => {
                let quoted = serde_json::to_string(name)
                    .map_err(|e| internal(format!("the name `{name}`: {e}")))?;
                prop.name()
                    .and_then(|n| n.as_string_lit())
                    .ok_or_else(|| internal(format!("entry `{key}` has no quoted name")))?
                    .set_raw_value(quoted);
                rw
            }
        };
        let obj = prop
            .object_value()
            .ok_or_else(|| internal(format!("entry `{key}` is not an object")))?;
        let args = CstInputValue::Array(
            rw.args
                .iter()
                .map(|a| CstInputValue::String(a.clone()))
                .collect(),
        );
        let command = obj
            .get("command")
            .ok_or_else(|| internal(format!("entry `{key}` has no command")))?;
        command.set_value(CstInputValue::String(rw.command.clone()));
        match obj.get("args") {
            Some(a) => a.set_value(args),
            None => {
                obj.insert(command.property_index() + 1, "args", args);
            }
        }
        for gone in ["env", "envFile", "cwd"] {
            if let Some(p) = obj.get(gone) {
                p.remove();
            }
        }
        apply(&mut expected, pointer, key, edit);
    }
    let out = doc.text();
    let again = parse(path, &out)?;
    if again.value() != expected {
        return Err(internal(
            "the edited file does not read back as intended".to_string(),
        ));
    }
    Ok(out)
}

/// The intended change on the document's value: what the rewritten text must read back as.
pub fn apply(doc: &mut Value, pointer: &[String], key: &str, edit: &Edit) {
    let mut v = doc;
    for k in pointer {
        match v.get_mut(k) {
            Some(next) => v = next,
            None => return,
        }
    }
    let Some(object) = v.as_object_mut() else {
        return;
    };
    let (key, rw) = match edit {
        Edit::Remove => {
            object.remove(key);
            return;
        }
        Edit::Point(rw) => (key, rw),
        Edit::PointAs(name, rw) => {
            if let Some(entry) = object.remove(key) {
                object.insert(name.clone(), entry);
            }
            (name.as_str(), rw)
        }
    };
    if let Some(Value::Object(e)) = object.get_mut(key) {
        e.insert("command".into(), Value::String(rw.command.clone()));
        e.insert(
            "args".into(),
            Value::Array(rw.args.iter().cloned().map(Value::String).collect()),
        );
        for gone in ["env", "envFile", "cwd"] {
            e.remove(gone);
        }
    }
}
