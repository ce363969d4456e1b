package routerdisagg

import "github.com/duet-ai/duet/plugins/router-disagg/sched"

// NewWith returns a router whose profiles take these options too, such as sched.MemoizeFrom.
func NewWith(cfg Config, opts ...sched.Option) (*Router, error) { return newRouter(cfg, opts...) }
