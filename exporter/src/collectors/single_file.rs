//! The collector of one source file: read it, parse it into a value kept
//! between scrapes (its buffers reused), write families from that value.
//! A collector whose whole job is that declares only its parser and its
//! writer: `single_file::boxed(SourceFile::new(&s.procfs, "meminfo"),
//! parse_into, write)`. An absent file writes nothing, as for any source.

use crate::kernel::error::{CollectError, ParseError};
use crate::kernel::source::SourceFile;
use crate::scrape::collector::Collector;
use crate::scrape::exposition::Encoder;

/// A pure parser of the file's text into a value it fills in.
pub type Parse<T> = fn(&str, &mut T) -> Result<(), ParseError>;
/// Writes a parsed value's families.
pub type Write<T> = fn(&T, &mut Encoder);

struct SingleFile<T> {
    file: SourceFile,
    parsed: T,
    parse: Parse<T>,
    write: Write<T>,
}

/// A collector of `file`.
pub fn boxed<T: Default + Send + 'static>(
    file: SourceFile,
    parse: Parse<T>,
    write: Write<T>,
) -> Box<dyn Collector> {
    Box::new(SingleFile {
        file,
        parsed: T::default(),
        parse,
        write,
    })
}

impl<T: Send> Collector for SingleFile<T> {
    fn collect(&mut self, enc: &mut Encoder) -> Result<(), CollectError> {
        let (parse, parsed) = (self.parse, &mut self.parsed);
        if self.file.parse_with(|t| parse(t, parsed))?.is_none() {
            return Ok(());
        }
        (self.write)(&self.parsed, enc);
        Ok(())
    }
}
