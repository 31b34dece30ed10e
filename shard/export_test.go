package shard

// Hooks are the pause points of a Group's Run, for tests.
type Hooks struct {
	Moving    func(id int)    // in the member's loop, as it ends a shard's Context with ErrMoved
	Releasing func(id int)    // before a shard's release is sent
	Left      func()          // after the member's key was deleted, before its shards are ended
	Acted     func(rev int64) // in the member's loop, once it acted on the view at rev
	Rejoining func()          // in the member's loop, as it starts to join again after its key went
}

// SetHooks sets g's pause points; call it before Run.
func SetHooks(g *Group, h Hooks) {
	g.hooks = &hooks{moving: h.Moving, releasing: h.Releasing, left: h.Left, acted: h.Acted, rejoining: h.Rejoining}
}

// Assign is the assignment function, for the tests of other packages.
var Assign = assign
