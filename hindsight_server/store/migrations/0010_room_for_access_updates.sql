-- Every recall bumps its hits' access counters (a batched UPDATE once a second). On a full page the
-- new row version goes to another page and into every index, the two HNSW graphs included: at 1M
-- memories 82% of those updates were such (n_tup_hot_upd), 260 ms a flush, and each left a dead entry
-- in the graphs for vacuum. No index covers the counters, so with room on the page the update is HOT
-- (same page, no index touched). Pages written from now on keep a fifth free; existing ones gain room
-- as vacuum and HOT pruning free their dead versions.
ALTER TABLE memories SET (fillfactor = 80);
