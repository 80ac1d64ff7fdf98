//! Text wrapped to a width in terminal columns, for values the panels show under a label.

/// `text` in lines of at most `width` columns, broken after the line's last space, else (a
/// word longer than a line) at the width.
pub(crate) fn lines(text: &str, width: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut line = String::new();
    let mut columns = 0;
    // Where `line` may be broken: after its last space, with the columns up to there.
    let mut space: Option<(usize, usize)> = None;
    for c in text.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if columns + w > width && !line.is_empty() {
            if let Some((at, cols)) = space {
                let rest = line.split_off(at);
                out.push(std::mem::replace(&mut line, rest));
                columns -= cols;
            } else {
                out.push(std::mem::take(&mut line));
                columns = 0;
            }
            space = None;
        }
        line.push(c);
        columns += w;
        if c == ' ' {
            space = Some((line.len(), columns));
        }
    }
    out.push(line);
    out
}

#[cfg(test)]
mod tests {
    use super::lines;

    #[test]
    fn lines_break_after_the_last_space_and_inside_a_word_only_when_it_is_longer() {
        assert_eq!(lines("aa bb cc", 5), ["aa ", "bb cc"]);
        assert_eq!(lines("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(lines("ab cdefghij", 4), ["ab ", "cdef", "ghij"]);
        assert_eq!(lines("", 4), [""]);
        // Wide characters take two columns each.
        assert_eq!(lines("日本語テキスト", 6), ["日本語", "テキス", "ト"]);
        for width in 1..12 {
            let text = "torchrun --nproc-per-node 8 train.py --config a/b.yaml";
            let wrapped = lines(text, width);
            assert_eq!(wrapped.concat(), text, "nothing lost at {width}");
            assert!(
                wrapped.iter().all(|l| l.chars().count() <= width),
                "{wrapped:?}"
            );
        }
    }
}
