//! Changing a pool after it was made: `size`, `min_size`, its name, its
//! compression settings and its application tags.
//! (`pg_num` growth, a split, is [`ClusterMap::set_pg_num`].) Each refuses
//! a value the pool cannot take, with the reason, and changes nothing then.

use crate::{validate_pool_name, ClusterMap, MapError, Pool};

impl ClusterMap {
    fn pool_mut(&mut self, name: &str) -> Result<&mut Pool, MapError> {
        self.pools
            .values_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| MapError::NoSuchPool(name.into()))
    }

    /// Set the number of copies. Refused if the pool's CRUSH rule cannot
    /// place that many on the `in` OSDs now, or if it would drop below
    /// `min_size`. Returns whether anything changed; the PGs re-peer with
    /// their new acting sets (new copies are backfilled).
    pub fn set_pool_size(&mut self, name: &str, size: u32) -> Result<bool, MapError> {
        let pool = self.pool_mut(name)?;
        Pool::validate_params(size, pool.min_size.min(size), pool.pg_num)?;
        if size < pool.min_size {
            return Err(MapError::Invalid(format!(
                "size {size} is below the pool's min_size {}: lower min_size first",
                pool.min_size
            )));
        }
        if pool.size == size {
            return Ok(false);
        }
        let rule = pool.rule;
        self.check_rule(rule, size)?;
        self.pool_mut(name)?.size = size;
        self.placements.clear();
        Ok(true)
    }

    /// Set how many copies must be up for a PG to serve I/O (1..=size).
    pub fn set_pool_min_size(&mut self, name: &str, min_size: u32) -> Result<bool, MapError> {
        let pool = self.pool_mut(name)?;
        Pool::validate_params(pool.size, min_size, pool.pg_num)?;
        if pool.min_size == min_size {
            return Ok(false);
        }
        pool.min_size = min_size;
        Ok(true)
    }

    /// Rename a pool. Its id, and so every object's placement, stays.
    pub fn rename_pool(&mut self, name: &str, new_name: &str) -> Result<bool, MapError> {
        validate_pool_name(new_name)?;
        if name == new_name {
            self.pool_mut(name)?;
            return Ok(false);
        }
        if self.pool_by_name(new_name).is_some() {
            return Err(MapError::PoolExists(new_name.into()));
        }
        self.pool_mut(name)?.name = new_name.to_string();
        Ok(true)
    }
}

/// Longest application tag.
pub const MAX_APPLICATION_LEN: usize = 64;
/// Most application tags on one pool.
pub const MAX_APPLICATIONS: usize = 16;

impl ClusterMap {
    /// Set one of the pool's `compression_*` options (`default`: the OSDs'
    /// own setting again). Returns whether anything changed.
    pub fn set_pool_compression(
        &mut self,
        name: &str,
        key: &str,
        value: &str,
    ) -> Result<bool, MapError> {
        let pool = self.pool_mut(name)?;
        let field = key.strip_prefix("compression_").unwrap_or(key);
        pool.compression
            .set(field, value)
            .map_err(MapError::Invalid)
    }

    /// Tag the pool as used by `app` (`enable`) or drop the tag. Returns
    /// whether anything changed.
    pub fn set_pool_application(
        &mut self,
        name: &str,
        app: &str,
        enable: bool,
    ) -> Result<bool, MapError> {
        let valid = !app.is_empty()
            && app.len() <= MAX_APPLICATION_LEN
            && app
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !valid {
            return Err(MapError::Invalid(format!(
                "application '{app}' must be 1 to {MAX_APPLICATION_LEN} letters, digits, '_', '-' or '.'"
            )));
        }
        let pool = self.pool_mut(name)?;
        if !enable {
            return Ok(pool.application.remove(app));
        }
        if !pool.application.contains(app) && pool.application.len() >= MAX_APPLICATIONS {
            return Err(MapError::Invalid(format!(
                "pool '{name}' already has {MAX_APPLICATIONS} applications, the most it may"
            )));
        }
        Ok(pool.application.insert(app.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use cairn_crush::WEIGHT_ONE;
    use cairn_types::PgId;

    use crate::{ClusterMap, MapError};

    fn map_with_osds(n: u32) -> ClusterMap {
        let mut map = ClusterMap::new("test".into());
        for id in 0..n {
            map.osd_boot(id, format!("127.0.0.1:{}", 7000 + id), WEIGHT_ONE);
        }
        map.create_pool("p", 2, 1, 8).expect("pool");
        map
    }

    #[test]
    fn size_grows_within_what_crush_can_place_and_never_below_min_size() {
        let mut map = map_with_osds(3);
        let pool = map.pool_by_name("p").expect("p").id;
        assert_eq!(map.up(PgId::new(pool, 0)).len(), 2);
        assert_eq!(map.set_pool_size("p", 3), Ok(true));
        assert_eq!(map.set_pool_size("p", 3), Ok(false));
        assert_eq!(map.up(PgId::new(pool, 0)).len(), 3, "placement recomputed");
        let err = map.set_pool_size("p", 4).expect_err("4 copies on 3 OSDs");
        assert_eq!(map.pool_by_name("p").map(|p| p.size), Some(3), "{err}");
        assert_eq!(map.set_pool_min_size("p", 3), Ok(true));
        let err = map.set_pool_size("p", 2).expect_err("below min_size");
        assert!(err.to_string().contains("min_size"), "{err}");
        assert!(map.set_pool_min_size("p", 4).is_err());
        assert!(map.set_pool_min_size("p", 0).is_err());
        assert_eq!(
            map.pool_by_name("p").map(|p| (p.size, p.min_size)),
            Some((3, 3))
        );
    }

    #[test]
    fn a_renamed_pool_keeps_its_id_and_placement() {
        let mut map = map_with_osds(3);
        map.create_pool("q", 2, 1, 8).expect("q");
        let id = map.pool_by_name("p").expect("p").id;
        let before = map.up(PgId::new(id, 3));
        assert_eq!(
            map.rename_pool("p", "q"),
            Err(MapError::PoolExists("q".into()))
        );
        assert!(map.rename_pool("p", ".bad").is_err());
        assert_eq!(map.rename_pool("p", "r"), Ok(true));
        assert!(map.pool_by_name("p").is_none());
        assert_eq!(map.pool_by_name("r").map(|p| p.id), Some(id));
        assert_eq!(map.up(PgId::new(id, 3)), before);
        assert_eq!(
            map.rename_pool("nope", "x"),
            Err(MapError::NoSuchPool("nope".into()))
        );
    }

    #[test]
    fn compression_and_application_tags_are_checked() {
        let mut map = map_with_osds(3);
        assert_eq!(
            map.set_pool_compression("p", "compression_mode", "force"),
            Ok(true)
        );
        assert_eq!(
            map.set_pool_compression("p", "compression_mode", "force"),
            Ok(false)
        );
        assert!(map
            .set_pool_compression("p", "compression_mode", "sometimes")
            .is_err());
        assert!(map
            .set_pool_compression("nosuch", "compression_mode", "force")
            .is_err());
        let pool = map.pool_by_name("p").expect("p");
        assert_eq!(pool.compression.mode.as_deref(), Some("force"));
        assert_eq!(map.set_pool_application("p", "rbd", true), Ok(true));
        assert_eq!(map.set_pool_application("p", "rbd", true), Ok(false));
        assert!(map.set_pool_application("p", "r b d", true).is_err());
        assert!(map.set_pool_application("p", "", true).is_err());
        assert_eq!(map.set_pool_application("p", "rbd", false), Ok(true));
        assert!(map.pool_by_name("p").expect("p").application.is_empty());
    }
}
