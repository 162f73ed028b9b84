//! Nodes of a custom domain whose op type is a registered custom kernel
//! (`crate::ops::custom`): each becomes one `custom` node. Every input must be present (no
//! optional gaps) and the node has one output; its int, float, int-list, float-list and
//! string attributes pass through by name in the node's `attrs` string, and any other
//! attribute kind (tensors, graphs) is unsupported.

use super::build::{one, unsupported, Outs};
use super::import::{Importer, NResult};
use super::proto::attribute_proto::AttributeType;
use super::proto::NodeProto;
use crate::ir::AttrValue;
use crate::ops::custom::{CustomAttr, CustomAttrs};
use crate::ops::OpKind;

/// Converts `node` to the custom op registered as `name`.
pub(super) fn convert<'m>(imp: &mut Importer<'m>, node: &'m NodeProto, name: &str) -> NResult<Outs> {
    if node.output.len() != 1 {
        return unsupported(format!("custom op {name} with {} outputs (one is supported)", node.output.len()));
    }
    let mut attrs = CustomAttrs::default();
    for a in &node.attribute {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let value = match AttributeType::try_from(a.r#type) {
            Ok(AttributeType::Int) => CustomAttr::Int(a.i),
            Ok(AttributeType::Float) => CustomAttr::Float(f64::from(a.f)),
            Ok(AttributeType::Ints) => CustomAttr::Ints(a.ints.clone()),
            Ok(AttributeType::Floats) => CustomAttr::Floats(a.floats.iter().map(|&x| f64::from(x)).collect()),
            Ok(AttributeType::String) => CustomAttr::Str(text(&a.s)),
            _ => {
                return unsupported(format!("attribute `{}` of custom op {name}: not an int, float or string", a.name))
            }
        };
        attrs.0.insert(a.name.clone(), value);
    }
    let encoded = attrs.encode().or_else(|e| unsupported(format!("custom op {name}: {e}")))?;
    let args = (0..node.input.len()).map(|i| imp.input(node, i)).collect::<NResult<Vec<_>>>()?;
    let attrs = [("name", AttrValue::Str(name.to_string())), ("attrs", AttrValue::Str(encoded))];
    one(imp.emit(OpKind::Custom, &args, &attrs)?)
}
