//! [`render_defaults`]: every option at its default as a commented
//! `cairn.toml` (`cairn config defaults`).

use crate::options;

/// A commented `cairn.toml` with every option at its default, each preceded
/// by its documentation. [`Config::parse`] reads it back to
/// [`Config::default`].
pub fn render_defaults() -> String {
    let mut out = String::from(
        "# cairn.toml: Cairn configuration.\n\
         #\n\
         # Every option is listed with its default value. Unknown sections and\n\
         # options are errors. Options for a single OSD go in an [osd.N] section,\n\
         # which overrides [osd] for OSD N only, for example:\n\
         #\n\
         #   [osd.3]\n\
         #   store = \"memstore\"\n",
    );
    let mut section = "";
    for opt in options() {
        if opt.section != section {
            section = opt.section;
            out.push_str(&format!("\n[{section}]\n"));
        } else {
            out.push('\n');
        }
        for line in wrap(opt.doc, 76) {
            out.push_str(&format!("# {line}\n"));
        }
        out.push_str(&format!(
            "# Type: {}. {}\n",
            opt.kind,
            if opt.runtime {
                "Changes at runtime (cairn config set)."
            } else {
                "Read at start."
            }
        ));
        out.push_str(&format!("{} = {}\n", opt.name, opt.default));
    }
    out
}

/// Splits `text` into lines of at most `width` characters at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}
