//! Fields of the JSON bodies renamed from canvas words to channel words.
//!
//! The upgrade to channels runs nodes first, then gateways, then the publisher
//! (docs/operations.md), so for one release a renamed field is written under both names, the old
//! one deprecated, and read under its new name or, from an older binary that has only the old
//! one, under that. [`renamed_fields!`] declares such a group of fields; a body embeds it with
//! `#[serde(flatten)]`.

/// Declares a struct of fields `new / old: Type` whose `Serialize` writes each value under both
/// names (the new ones first) and whose `Deserialize` takes the new name, else the old one, else
/// the type's default. A body with both names is read by the new one.
macro_rules! renamed_fields {
    ($(#[$meta:meta])* pub struct $name:ident { $( $(#[$fmeta:meta])* pub $new:ident / $old:ident : $ty:ty ),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct $name { $( $(#[$fmeta])* pub $new: $ty, )* }

        impl $name {
            /// `(new, old)` names of the fields, in order.
            pub const NAMES: &'static [(&'static str, &'static str)] = &[$( (stringify!($new), stringify!($old)), )*];
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut m = s.serialize_map(None)?;
                $( m.serialize_entry(stringify!($new), &self.$new)?; )*
                $( m.serialize_entry(stringify!($old), &self.$new)?; )*
                m.end()
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                #[derive(serde::Deserialize)]
                struct Wire { $( #[serde(default)] $new: Option<$ty>, #[serde(default)] $old: Option<$ty>, )* }
                let w = Wire::deserialize(d)?;
                Ok(Self { $( $new: w.$new.or(w.$old).unwrap_or_default(), )* })
            }
        }
    };
}
pub(crate) use renamed_fields;
