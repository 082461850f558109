//! Atlassian Document Format (ADF), both ways, bounded:
//! [`from_markdown`] makes a comment body from the agent's plain text or simple
//! markdown (paragraphs, `-`/`*` bullet lists, fenced code blocks); [`to_text`]
//! reads an ADF document (a description, a comment) back as plain text.

use serde_json::{json, Value};

/// The ADF document for `text`.
pub fn from_markdown(text: &str) -> Value {
    let mut content: Vec<Value> = Vec::new();
    let mut para: Vec<&str> = Vec::new();
    let mut items: Vec<&str> = Vec::new();
    let mut code: Option<(String, Vec<&str>)> = None;
    let flush_para = |para: &mut Vec<&str>, content: &mut Vec<Value>| {
        if !para.is_empty() {
            let mut inline: Vec<Value> = Vec::new();
            for (i, line) in para.iter().enumerate() {
                if i > 0 {
                    inline.push(json!({"type": "hardBreak"}));
                }
                if !line.is_empty() {
                    inline.push(json!({"type": "text", "text": line}));
                }
            }
            content.push(json!({"type": "paragraph", "content": inline}));
            para.clear();
        }
    };
    let flush_items = |items: &mut Vec<&str>, content: &mut Vec<Value>| {
        if !items.is_empty() {
            let list: Vec<Value> = items
                .iter()
                .map(|t| {
                    json!({"type": "listItem", "content": [
                        {"type": "paragraph", "content": [{"type": "text", "text": t}]}]})
                })
                .collect();
            content.push(json!({"type": "bulletList", "content": list}));
            items.clear();
        }
    };
    for line in text.lines() {
        if let Some((lang, lines)) = code.as_mut() {
            if line.trim_start().starts_with("```") {
                let body = lines.join("\n");
                let mut block = json!({"type": "codeBlock", "content": []});
                if !lang.is_empty() {
                    block["attrs"] = json!({"language": lang});
                }
                if !body.is_empty() {
                    block["content"] = json!([{"type": "text", "text": body}]);
                }
                content.push(block);
                code = None;
            } else {
                lines.push(line);
            }
            continue;
        }
        let trimmed = line.trim();
        if let Some(lang) = trimmed.strip_prefix("```") {
            flush_para(&mut para, &mut content);
            flush_items(&mut items, &mut content);
            code = Some((lang.trim().to_string(), Vec::new()));
        } else if let Some(item) = trimmed
            .strip_prefix("- ")
            .or_else(|| trimmed.strip_prefix("* "))
        {
            flush_para(&mut para, &mut content);
            items.push(item.trim());
        } else if trimmed.is_empty() {
            flush_para(&mut para, &mut content);
            flush_items(&mut items, &mut content);
        } else {
            flush_items(&mut items, &mut content);
            para.push(line.trim_end());
        }
    }
    if let Some((lang, lines)) = code {
        // An unclosed fence: the rest is code.
        let mut block =
            json!({"type": "codeBlock", "content": [{"type": "text", "text": lines.join("\n")}]});
        if !lang.is_empty() {
            block["attrs"] = json!({"language": lang});
        }
        content.push(block);
    }
    flush_para(&mut para, &mut content);
    flush_items(&mut items, &mut content);
    json!({"type": "doc", "version": 1, "content": content})
}

/// An ADF node as plain text, at most `max` bytes (lists as `- `, code fenced,
/// mentions as their text).
pub fn to_text(node: &Value, max: usize) -> String {
    let mut out = String::new();
    walk(node, &mut out, max, 0);
    let trimmed = out.trim_end().to_string();
    sdk::tracker::clip(&trimmed, max).0.to_string()
}

fn walk(node: &Value, out: &mut String, max: usize, depth: usize) {
    if out.len() > max || depth > 64 {
        return;
    }
    let kind = node.get("type").and_then(Value::as_str).unwrap_or_default();
    let children = |out: &mut String| {
        for c in node
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            walk(c, out, max, depth + 1);
        }
    };
    match kind {
        "text" => out.push_str(node.get("text").and_then(Value::as_str).unwrap_or_default()),
        "hardBreak" => out.push('\n'),
        "mention" => out.push_str(
            node.pointer("/attrs/text")
                .and_then(Value::as_str)
                .unwrap_or("@someone"),
        ),
        "emoji" => out.push_str(
            node.pointer("/attrs/shortName")
                .and_then(Value::as_str)
                .unwrap_or_default(),
        ),
        "paragraph" | "heading" => {
            children(out);
            out.push_str("\n\n");
        }
        "listItem" => {
            out.push_str("- ");
            let mut inner = String::new();
            for c in node
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                walk(c, &mut inner, max, depth + 1);
            }
            out.push_str(inner.trim_end());
            out.push('\n');
        }
        "bulletList" | "orderedList" => {
            children(out);
            out.push('\n');
        }
        "codeBlock" => {
            out.push_str("```\n");
            children(out);
            out.push_str("\n```\n\n");
        }
        _ => children(out),
    }
}
