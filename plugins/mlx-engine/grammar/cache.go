package grammar

import (
	"bytes"
	"container/list"
	"encoding/json"
	"fmt"
	"sync"
)

// Cache keeps compiled grammars by key, least recently used out first, since clients send the same schema
// with every request. Refusals are cached too: a schema that failed once fails the same way again. It is safe
// for concurrent use; concurrent requests for one key compile it once.
type Cache struct {
	mu      sync.Mutex
	max     int
	entries map[string]*list.Element
	order   *list.List // front: most recently used
}

type cacheEntry struct {
	key  string
	once sync.Once
	g    *Grammar
	err  error
}

// NewCache makes a cache of at most capacity grammars (at least one).
func NewCache(capacity int) *Cache {
	return &Cache{max: max(capacity, 1), entries: map[string]*list.Element{}, order: list.New()}
}

// Get returns the grammar for key, building it with build on a miss.
func (c *Cache) Get(key string, build func() (*Grammar, error)) (*Grammar, error) {
	c.mu.Lock()
	el, ok := c.entries[key]
	if ok {
		c.order.MoveToFront(el)
	} else {
		el = c.order.PushFront(&cacheEntry{key: key})
		c.entries[key] = el
		for c.order.Len() > c.max {
			last := c.order.Back()
			c.order.Remove(last)
			delete(c.entries, last.Value.(*cacheEntry).key)
		}
	}
	e := el.Value.(*cacheEntry)
	c.mu.Unlock()
	e.once.Do(func() { e.g, e.err = build() })
	return e.g, e.err
}

// Len is the number of grammars held.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// JSONSchema returns the compiled grammar of a JSON schema, from the cache when the same schema (up to
// insignificant whitespace; member order matters, since properties are generated in it) and options were
// compiled before.
func (c *Cache) JSONSchema(schema []byte, opts Options) (*Grammar, error) {
	return c.Get(SchemaKey(schema, opts), func() (*Grammar, error) {
		n, err := JSONSchema(schema, opts)
		if err != nil {
			return nil, err
		}
		return Compile(n)
	})
}

// SchemaKey is the cache key of a schema with options: the schema's compact bytes.
func SchemaKey(schema []byte, opts Options) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "json-schema strict=%t ws=%d depth=%d\n", opts.Strict, opts.Whitespace, opts.MaxDepth)
	if err := json.Compact(&b, schema); err != nil {
		b.Write(schema)
	}
	return b.String()
}
