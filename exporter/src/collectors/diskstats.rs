//! Placeholder: to be implemented.

use crate::collector::Collector;
use crate::collectors::Settings;
use crate::error::CollectError;
use crate::exposition::Encoder;

pub const DEFAULT_DEVICE_EXCLUDE: &str = "^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\\d+n\\d+p)\\d+$";

struct Todo;

impl Collector for Todo {
    fn collect(&mut self, _enc: &mut Encoder) -> Result<(), CollectError> {
        Ok(())
    }
}

pub fn build(_s: &Settings) -> Box<dyn Collector> {
    Box::new(Todo)
}
