use super::*;

fn split(source: &str) -> String {
    split_concatenations(source).unwrap_or_else(|| panic!("not split: {source}"))
}

#[test]
fn a_chatml_message_block_becomes_one_block_per_operand() {
    let source =
        r"{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}";
    assert_eq!(
        split(source),
        r"{{ '<|im_start|>' }}{{ __switchboard_piece(message['role']) }}{{ '\n' }}{{ __switchboard_piece(message['content']) }}{{ '<|im_end|>' }}{{ '\n' }}"
    );
}

#[test]
fn whitespace_markers_stay_on_the_outer_pieces() {
    assert_eq!(
        split("a {{- 'x' ~ y -}} b"),
        "a {{- 'x' }}{{ __switchboard_piece(y) -}} b"
    );
    assert_eq!(
        split("{{-name + '!'}}"),
        "{{- __switchboard_piece(name) }}{{ '!' }}"
    );
}

#[test]
fn text_and_other_tags_around_blocks_are_kept() {
    assert_eq!(
        split("A{{ 'x' + y }}B{% if z %}C{# {{ a + b }} #}{% endif %}{{ w }}{"),
        "A{{ 'x' }}{{ __switchboard_piece(y) }}B{% if z %}C{# {{ a + b }} #}{% endif %}{{ w }}{"
    );
}

#[test]
fn strings_brackets_filters_and_calls_stay_within_their_operand() {
    assert_eq!(
        split(r#"{{ 'a + b }}' + c['x + y'] + f(1 + 2)|g(h=[1, 2]) + "q\"+" + d.e.f }}"#),
        r#"{{ 'a + b }}' }}{{ __switchboard_piece(c['x + y']) }}{{ __switchboard_piece(f(1 + 2)|g(h=[1, 2])) }}{{ "q\"+" }}{{ __switchboard_piece(d.e.f) }}"#
    );
    // A keyword's name as an attribute is not the keyword.
    assert_eq!(
        split("{{ a.is + b }}"),
        "{{ __switchboard_piece(a.is) }}{{ __switchboard_piece(b) }}"
    );
}

#[test]
fn blocks_that_are_not_joins_are_left_alone() {
    for source in [
        "{{ a }}",
        "{{ (a + b)|trim }}",
        "{{ f(a + b) }}",
        "{{ a + b if c else d }}",
        "{{ a - b + c }}",
        "{{ a * b + c }}",
        "{{ not a + b }}",
        "{{ a + b is defined }}",
        "{{ a + b in c }}",
        "{{ a + b == c }}",
        "{{ a + b, c }}",
        "{{ +a }}",
        "{{ a + }}",
        "{{ a + -b }}",
        "{{+ a + b }}",
        "{{ a + b +}}",
        "{% set x = a + b %}{{ x }}",
        "{# {{ a + b }} #}",
        "{% raw %}{{ a + b }}{% endraw %}",
        "{%- raw -%} {{ a + b }} {%- endraw %}",
        "{% set s = '{{ a + b }}' %}",
        "text only",
    ] {
        assert_eq!(split_concatenations(source), None, "{source}");
    }
}

#[test]
fn a_template_it_cannot_read_is_not_rewritten() {
    for source in [
        "{{ 'a' + b",
        "{{ 'a + b }}",
        "{# {{ a + b }}",
        "{% raw %}{{ a + b }}",
    ] {
        assert_eq!(split_concatenations(source), None, "{source}");
    }
}

#[test]
fn only_strings_pass_through_the_piece_function() {
    assert_eq!(piece(Value::from("x")).unwrap().as_str(), Some("x"));
    assert!(piece(Value::from(1)).is_err());
    assert!(piece(Value::UNDEFINED).is_err());
    assert!(piece(Value::from(())).is_err());
    assert!(piece(Value::from(vec!["x"])).is_err());
}

mod equivalence {
    use super::super::super::{ChatTemplate, DEFAULT, SPLIT_FROM_BYTES};
    use minijinja::context;
    use proptest::prelude::*;

    /// Output blocks made of expression tokens, between bits of text and other tags.
    fn template() -> impl Strategy<Value = String> {
        let token = prop::sample::select(vec![
            "a",
            "b",
            "n",
            "xs",
            "'s'",
            "\"t\\\"\"",
            "'}}'",
            "1",
            "+",
            "~",
            "-",
            "*",
            "(",
            ")",
            "[0]",
            ".upper()",
            "|upper",
            "|length",
            " if a else ",
            " is defined",
            " not ",
            ",",
            " ",
            "[",
            "]",
        ]);
        let expr = prop::collection::vec(token, 1..8).prop_map(|t| t.concat());
        let part = prop_oneof![
            expr.prop_map(|e| format!("{{{{{e}}}}}")),
            Just("{{- a + b -}}".to_owned()),
            Just(" text\n".to_owned()),
            Just("{% if a %}".to_owned()),
            Just("{% endif %}".to_owned()),
            Just("{# a + b #}".to_owned()),
            Just("{% raw %}{{ a + b }}{% endraw %}".to_owned()),
            Just("{".to_owned()),
        ];
        prop::collection::vec(part, 1..6).prop_map(|p| p.concat())
    }

    proptest! {
        /// Whatever the template and whatever the operands' types, the split form (with its
        /// fall back) renders what the original renders, or fails where it fails.
        #[test]
        fn the_split_form_renders_what_the_original_renders(source in template()) {
            let Ok(t) = ChatTemplate::new(source.clone(), None) else {
                return Ok(());
            };
            for ctx in [
                context! { a => "A", b => "B", n => "N", xs => "XS" },
                context! { a => "A", b => 2, n => 3, xs => vec!["x", "y"] },
            ] {
                let original = t.render_named(DEFAULT, ctx.clone());
                let rendered = t.render(ctx, false, SPLIT_FROM_BYTES);
                prop_assert_eq!(
                    rendered.map_err(|e| e.to_string()),
                    original.map_err(|e| e.to_string()),
                    "{}", source
                );
            }
        }
    }
}
