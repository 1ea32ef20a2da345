//! A small element tree over `quick-xml`, for the parts of an Office file the readers walk
//! (a part is read whole, its size capped beforehand, so a tree is no larger than the cap).

use quick_xml::Reader;
use quick_xml::events::Event;

/// One element: its local name (namespace prefix dropped), attributes by local name, and its
/// children in order.
#[derive(Debug, Default)]
pub(crate) struct Element {
    pub(crate) name: String,
    /// Attributes by qualified name (`r:id`), in order.
    pub(crate) attrs: Vec<(String, String)>,
    pub(crate) children: Vec<Node>,
}

/// A child of an element.
#[derive(Debug)]
pub(crate) enum Node {
    Element(Element),
    Text(String),
}

impl Element {
    /// The value of the attribute with this local name.
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k.rsplit(':').next() == Some(name))
            .map(|(_, v)| v.as_str())
    }

    /// The value of a prefixed attribute with this local name (`r:id` beside a plain `id`).
    pub(crate) fn prefixed_attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k.split_once(':').is_some_and(|(_, local)| local == name))
            .map(|(_, v)| v.as_str())
    }

    /// Child elements, in order.
    pub(crate) fn elements(&self) -> impl Iterator<Item = &Element> {
        self.children.iter().filter_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Text(_) => None,
        })
    }

    /// The first child element named `name`.
    pub(crate) fn child(&self, name: &str) -> Option<&Element> {
        self.elements().find(|e| e.name == name)
    }

    /// The first descendant (depth first) named `name`.
    pub(crate) fn find(&self, name: &str) -> Option<&Element> {
        for e in self.elements() {
            if e.name == name {
                return Some(e);
            }
            if let Some(found) = e.find(name) {
                return Some(found);
            }
        }
        None
    }

    /// Every descendant named `name`, depth first (not looking inside a match).
    pub(crate) fn find_all<'a>(&'a self, name: &str, into: &mut Vec<&'a Element>) {
        for e in self.elements() {
            if e.name == name {
                into.push(e);
            } else {
                e.find_all(name, into);
            }
        }
    }

    /// The text directly inside this element.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        for n in &self.children {
            if let Node::Text(t) = n {
                out.push_str(t);
            }
        }
        out
    }
}

/// Parses `xml` into its root element; the error is quick-xml's, for the caller to name the part.
pub(crate) fn parse(xml: &str) -> Result<Element, String> {
    let mut reader = Reader::from_str(xml);
    let mut stack: Vec<Element> = vec![Element::default()];
    loop {
        let event = reader
            .read_event()
            .map_err(|e| format!("{e} at byte {}", reader.error_position()))?;
        match event {
            Event::Start(start) => {
                stack.push(element(&start)?);
            }
            Event::Empty(start) => {
                let e = element(&start)?;
                push(&mut stack, Node::Element(e));
            }
            Event::End(_) => {
                if stack.len() < 2 {
                    return Err("an end tag without its start".to_string());
                }
                if let Some(done) = stack.pop() {
                    push(&mut stack, Node::Element(done));
                }
            }
            Event::Text(text) => {
                push(&mut stack, Node::Text(text.xml10_content().into_owned()));
            }
            Event::CData(data) => {
                push(&mut stack, Node::Text(data.xml10_content().into_owned()));
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref() {
                    Ok(Some(c)) => c.to_string(),
                    _ => match &*r {
                        "lt" => "<".to_string(),
                        "gt" => ">".to_string(),
                        "amp" => "&".to_string(),
                        "apos" => "'".to_string(),
                        "quot" => "\"".to_string(),
                        other => format!("&{other};"),
                    },
                };
                push(&mut stack, Node::Text(resolved));
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if stack.len() != 1 {
        return Err("the document ends inside an element (truncated?)".to_string());
    }
    let root = stack.pop().unwrap_or_default();
    root.children
        .into_iter()
        .find_map(|n| match n {
            Node::Element(e) => Some(e),
            Node::Text(_) => None,
        })
        .ok_or_else(|| "no root element".to_string())
}

fn element(start: &quick_xml::events::BytesStart<'_>) -> Result<Element, String> {
    let mut attrs = Vec::new();
    for attr in start.attributes() {
        let attr = attr.map_err(|e| e.to_string())?;
        let value = attr
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|e| e.to_string())?;
        attrs.push((attr.key.as_ref().to_string(), value.into_owned()));
    }
    Ok(Element {
        name: start.local_name().as_ref().to_string(),
        attrs,
        children: Vec::new(),
    })
}

fn push(stack: &mut [Element], node: Node) {
    if let Some(top) = stack.last_mut() {
        top.children.push(node);
    }
}
