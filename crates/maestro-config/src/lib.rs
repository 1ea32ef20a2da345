//! scratch
#[cfg(test)]
mod scratch {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde::Deserialize;
    use serde_saphyr::{Spanned, MessageFormatter};

    #[derive(Debug, Deserialize, Default)]
    #[serde(default, deny_unknown_fields)]
    struct Llm { model: Option<String>, idle_timeout_secs: u64, tool_mode: Option<maestro_llm::ToolMode> }
    #[derive(Debug, Deserialize, Default)]
    #[serde(default, deny_unknown_fields)]
    struct C { llm: Llm, tools: maestro_tools::ToolsConfig }

    fn show(text: &str) {
        let mut path = None;
        let mut ignored = Vec::new();
        let r = serde_saphyr::with_deserializer_from_str(text, |de| {
            let mut cb = |p: serde_ignored::Path| ignored.push(p.to_string());
            let de = serde_ignored::Deserializer::new(de, &mut cb);
            serde_path_to_error::deserialize::<_, C>(de).map_err(|e| { path = Some(e.path().to_string()); e.into_inner() })
        });
        match r {
            Ok(c) => println!("OK {c:?} ignored={ignored:?}"),
            Err(e) => {
                println!("path={path:?} loc={:?}", e.location().map(|l| (l.line(), l.column())));
                println!("msg={}", serde_saphyr::DefaultMessageFormatter.format_message(e.without_snippet()));
                println!("user={}", e.render_with_formatter(&serde_saphyr::UserMessageFormatter));
                println!("display={e}");
            }
        }
        println!("----");
    }

    #[test]
    fn play() {
        show("llm:\n  model: x\n  modle: y\n");
        show("llm:\n  idle_timeout_secs: soon\n");
        show("llm:\n  tool_mode: nativ\n");
        show("tools:\n  bash_sandbx: off\n");
        show("llm: [1]\n");
        show("llm:\n  model: x\n  model: y\n");
        show("llm:\n  model: [x\n");
        show("");
        show("# only comment\n");
        let t: Vec<(Spanned<String>, serde_json::Value)> = serde_saphyr::from_str("- [a, 1]\n- [bb, 2]\n").unwrap();
        for (k, _) in &t { println!("{} {} {}", k.value, k.referenced.line(), k.referenced.column()); }
        let t: std::collections::HashMap<Spanned<String>, Spanned<serde_json::Value>> = serde_saphyr::from_str("a: 1\nbb:\n  c: 2\n").unwrap();
        for (k, v) in &t { println!("{} {} {} / {} {}", k.value, k.referenced.line(), k.referenced.column(), v.referenced.line(), v.referenced.column()); }
        let v: serde_json::Value = serde_saphyr::from_str("a: 1\nb: ~\nc: '1'\nd: 1.5\ne: [x]\n").unwrap();
        println!("{v}");
    }
}
