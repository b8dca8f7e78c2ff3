//! Text from a guest or from a file (a command line, symbol and module names, paths) made safe
//! for the place it is written: one function per target, used everywhere that target is
//! written. A character a target cannot carry is *replaced* by U+FFFD (never entity-encoded:
//! `&#27;` is as invalid in XML 1.0 as the raw byte), so what is left is still readable.
//!
//! | target | function | what it removes |
//! | --- | --- | --- |
//! | XML 1.0 (flamegraph.svg, JUnit) | [`xml_text`], [`xml_escape`] | characters XML 1.0 does not allow (C0 controls but tab/LF/CR, surrogates, U+FFFE/U+FFFF), C1 controls and DEL, [bidi and separator](is_bidi_or_separator) characters; [`xml_escape`] also escapes `<>&"'` |
//! | flame-graph frames, `perf script` text, Firefox Profiler names | [`flame_frame`] | as [`xml_text`], and `;` (the frame separator) and line breaks |
//! | terminal (report.txt, stdout, stderr, the text timeline) | [`terminal`] | C0 controls but tab and LF (ESC starts escape sequences), DEL, C1 controls, bidi and separator characters |
//! | Markdown table cells | [`markdown_code`] | as [`terminal`] and line breaks; `|` is escaped and the code span's fence outgrows any backticks inside |
//!
//! Bidi and separator characters are replaced in every target: an override (U+202E) or
//! isolate reorders what follows it on screen, so a name could show another name than the
//! one it is, and U+2028/U+2029 break lines in some viewers and editors where the output has
//! none.
//!
//! JSON needs nothing here: serde_json escapes every control character (`\u001b`).

use std::borrow::Cow;

/// What replaces a character a target cannot carry.
pub const REPLACEMENT: char = '\u{fffd}';

/// True for C1 controls and DEL: valid in XML 1.0, but terminals act on them (U+009B is a
/// one-character CSI).
fn c1_or_del(c: char) -> bool {
    ('\u{7f}'..='\u{9f}').contains(&c)
}

/// True for the characters that change the direction of the text around them (the
/// embeddings and overrides U+202A-U+202E, the isolates U+2066-U+2069, the marks U+200E,
/// U+200F and U+061C) and for the line and paragraph separators U+2028 and U+2029: none is a
/// control character to Rust, yet each changes what the text around it looks like.
pub fn is_bidi_or_separator(c: char) -> bool {
    matches!(
        c,
        '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200e}'
            | '\u{200f}'
            | '\u{061c}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// A character XML 1.0 allows (its `Char` production), C1 controls, DEL, bidi and separator
/// characters excluded.
fn xml_allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
        && !c1_or_del(c)
        && !is_bidi_or_separator(c)
}

fn replace(s: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    if s.chars().all(&keep) {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(
            s.chars()
                .map(|c| if keep(c) { c } else { REPLACEMENT })
                .collect(),
        )
    }
}

/// `s` with every character XML 1.0 does not allow (and C1 controls, DEL) replaced; for text
/// an XML writer escapes itself (inferno's SVG).
pub fn xml_text(s: &str) -> Cow<'_, str> {
    replace(s, xml_allowed)
}

/// `s` for an XML attribute value or text node: [`xml_text`], then `<>&"'` escaped.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in xml_text(s).chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// One flame-graph frame (or title): [`xml_text`] on one line, `;` (inferno's frame
/// separator) as `:`.
pub fn flame_frame(s: &str) -> String {
    xml_text(s)
        .chars()
        .map(|c| match c {
            ';' => ':',
            '\n' | '\r' | '\t' => ' ',
            c => c,
        })
        .collect()
}

/// `s` for a terminal or a text file people `cat`: controls other than tab and newline
/// replaced, so no escape sequence (ESC, CSI) reaches the terminal, and bidi and separator
/// characters ([`is_bidi_or_separator`]) too.
pub fn terminal(s: &str) -> Cow<'_, str> {
    replace(s, |c| {
        c == '\n' || c == '\t' || !(c.is_control() || c1_or_del(c) || is_bidi_or_separator(c))
    })
}

/// `s` as an inline code span in a Markdown table cell: controls replaced, line breaks as
/// spaces, `|` escaped (GitHub tables split cells at it even inside code), and a backtick
/// fence longer than any run of backticks inside, padded when `s` starts or ends with one.
pub fn markdown_code(s: &str) -> String {
    let one_line: String = terminal(s)
        .chars()
        .map(|c| if matches!(c, '\n' | '\t') { ' ' } else { c })
        .collect();
    let longest_run = one_line
        .split(|c| c != '`')
        .map(str::len)
        .max()
        .unwrap_or(0);
    let fence = "`".repeat(longest_run + 1);
    let pad = if one_line.starts_with('`') || one_line.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{}{pad}{fence}", one_line.replace('|', "\\|"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A guest-given name carrying a right-to-left override, an isolate and a line separator
    /// (issue 40, item 11): `evil` would show as `live` after U+202E.
    pub(crate) const BIDI_NAME: &str = "a\u{202e}evil\u{2066}x\u{2028}y";

    /// Asserts that `text` (the output `what`) carries no bidi or separator character.
    pub(crate) fn assert_no_bidi(what: &str, text: &str) {
        if let Some(c) = text.chars().find(|c| is_bidi_or_separator(*c)) {
            panic!("{what} carries {c:?} raw:\n{text}");
        }
    }

    const HOSTILE: &str = "a\0b\x1b[31mred\x07</g>&\"'\u{fffe}\u{ffff}\u{9b}2J\u{7f};x\ny`z|w";

    #[test]
    fn xml_replaces_what_xml_1_0_forbids_and_escapes_markup() {
        let x = xml_escape(HOSTILE);
        assert_eq!(
            x,
            "a\u{fffd}b\u{fffd}[31mred\u{fffd}&lt;/g&gt;&amp;&quot;&apos;\u{fffd}\u{fffd}\u{fffd}2J\u{fffd};x\ny`z|w"
        );
        assert!(!x.contains("&#"), "no character references");
        assert_eq!(xml_text("plain <text>"), "plain <text>");
        assert!(matches!(xml_text("plain"), Cow::Borrowed(_)));
        assert_eq!(xml_text("tab\tcr\r\u{10000}"), "tab\tcr\r\u{10000}");
    }

    #[test]
    fn flame_frames_are_one_line_without_separators() {
        let f = flame_frame(HOSTILE);
        assert!(!f.contains(';') && !f.contains('\n') && !f.contains('\0'));
        assert!(f.contains("</g>&"), "inferno escapes markup itself");
    }

    #[test]
    fn the_terminal_gets_no_escape_sequences() {
        let t = terminal(HOSTILE);
        assert!(!t.contains('\x1b') && !t.contains('\u{9b}') && !t.contains('\0'));
        assert!(t.contains("\ny`z"), "newlines stay");
        assert!(
            t.contains("\u{fffe}"),
            "noncharacters are harmless on a terminal"
        );
        assert_eq!(terminal("ok\ttab\n"), "ok\ttab\n");
    }

    /// Every bidi and separator character of issue 40, item 11, in a name.
    const BIDI: &str = "a\u{202a}b\u{202b}c\u{202c}d\u{202d}e\u{202e}f\u{2066}g\u{2067}h\u{2068}i\u{2069}j\u{200e}k\u{200f}l\u{061c}m\u{2028}n\u{2029}o";

    /// `BIDI` with each of its 14 special characters replaced.
    fn bidi_replaced() -> String {
        "abcdefghijklmno"
            .chars()
            .map(String::from)
            .collect::<Vec<_>>()
            .join("\u{fffd}")
    }

    #[test]
    fn bidi_overrides_isolates_and_separators_reach_no_text_output_raw() {
        let want = bidi_replaced();
        assert_eq!(terminal(BIDI), want);
        assert_eq!(xml_text(BIDI), want);
        assert_eq!(xml_escape(BIDI), want);
        assert_eq!(flame_frame(BIDI), want);
        assert_eq!(markdown_code(BIDI), format!("`{want}`"));
        // Their neighbours are ordinary text.
        for c in ['\u{2029}', '\u{202a}', '\u{2069}'] {
            assert!(is_bidi_or_separator(c));
        }
        for c in [
            '\u{2027}', '\u{202f}', '\u{2065}', '\u{206a}', '\u{200d}', '\u{061b}',
        ] {
            assert!(!is_bidi_or_separator(c), "{c:?}");
        }
        assert_eq!(
            terminal("\u{05d0}\u{05d1} right-to-left text"),
            "\u{05d0}\u{05d1} right-to-left text"
        );
    }

    #[test]
    fn markdown_cells_stay_one_cell() {
        assert_eq!(markdown_code("m!f"), "`m!f`");
        assert_eq!(markdown_code("a|b"), "`a\\|b`");
        assert_eq!(markdown_code("a``b"), "```a``b```");
        assert_eq!(markdown_code("`x"), "`` `x ``");
        assert_eq!(markdown_code("l1\nl2\x1b"), "`l1 l2\u{fffd}`");
    }
}
