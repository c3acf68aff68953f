package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/teststorage"
)

// defaultContentType is what the Rust prometheus-client crate writes.
const defaultContentType = "application/openmetrics-text; version=1.0.0; charset=utf-8"

// scrapeInterval separates the scrapes: the first is stored at t0, the next
// at t0+30s, and so on; the queries are evaluated at the last.
const scrapeInterval = 30 * time.Second

// t0 is fixed, so that a run depends on its input alone.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// query is one expression of a dashboard and what it found.
type query struct {
	Title  string  `json:"title"`
	Expr   string  `json:"expr"`
	Series int     `json:"series"`
	Error  *string `json:"error"`
}

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// dashboards evaluates every expression of the dashboards in the templates
// named by args on the scrapes args name.
func dashboards(args []string) ([]query, error) {
	flags := flag.NewFlagSet("dashboards", flag.ContinueOnError)
	var scrapes, labelArgs repeated
	flags.Var(&scrapes, "scrape", "a scrape `FILE`, in order (repeated)")
	flags.Var(&labelArgs, "label", "a target label `NAME=VALUE`, also the value of the dashboards' $NAME (repeated)")
	contentType := flags.String("content-type", defaultContentType, "the Content-Type of the scrapes")
	if err := flags.Parse(args); err != nil {
		return nil, err
	}
	if len(scrapes) == 0 {
		return nil, errors.New("dashboards needs at least one --scrape FILE")
	}
	if flags.NArg() == 0 {
		return nil, errors.New("dashboards needs at least one TEMPLATE.go")
	}
	target, err := targetLabels(labelArgs)
	if err != nil {
		return nil, err
	}
	var queries []query
	for _, path := range flags.Args() {
		found, err := templateQueries(path, target)
		if err != nil {
			return nil, err
		}
		queries = append(queries, found...)
	}

	db, err := teststorage.NewWithError()
	if err != nil {
		return nil, fmt.Errorf("cannot open the in-memory storage: %w", err)
	}
	defer db.Close()
	ctx := context.Background()
	var previous map[uint64]labels.Labels
	at := t0
	for i, path := range scrapes {
		at = t0.Add(time.Duration(i) * scrapeInterval)
		if previous, err = ingest(ctx, db, path, *contentType, target, at, previous); err != nil {
			return nil, err
		}
	}

	engine := promql.NewEngine(promql.EngineOpts{
		MaxSamples:    50_000_000,
		Timeout:       time.Minute,
		LookbackDelta: 5 * time.Minute,
	})
	for i := range queries {
		series, err := evaluate(ctx, engine, db, queries[i].Expr, at)
		queries[i].Series = series
		if err != nil {
			message := err.Error()
			queries[i].Error = &message
		}
	}
	return queries, nil
}

// targetLabels parses the NAME=VALUE pairs.
func targetLabels(pairs []string) (labels.Labels, error) {
	b := labels.NewScratchBuilder(len(pairs))
	seen := map[string]bool{}
	for _, pair := range pairs {
		name, value, ok := strings.Cut(pair, "=")
		if !ok || !model.LegacyValidation.IsValidLabelName(name) || strings.HasPrefix(name, "__") {
			return labels.EmptyLabels(), fmt.Errorf("--label %q is not NAME=VALUE with a label name", pair)
		}
		if seen[name] {
			return labels.EmptyLabels(), fmt.Errorf("--label %s is given twice", name)
		}
		seen[name] = true
		b.Add(name, value)
	}
	b.Sort()
	return b.Labels(), nil
}

// dashboard is what is read of a Grafana dashboard: its panels, a row's
// panels nested in it, and each panel's queries.
type dashboard struct {
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// templateQueries reads the dashboards of a kubebuilder template: the Go
// string literals that hold a dashboard's JSON. Each expression's Grafana
// variables are replaced by the target labels' values.
func templateQueries(path string, target labels.Labels) ([]query, error) {
	files := token.NewFileSet()
	file, err := parser.ParseFile(files, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("cannot read the template %s: %w", path, err)
	}
	var queries []query
	var boards int
	var walk func([]panel) error
	walk = func(panels []panel) error {
		for _, p := range panels {
			for _, t := range p.Targets {
				if t.Expr == "" {
					continue
				}
				expr, err := substitute(t.Expr, target)
				if err != nil {
					return fmt.Errorf("%s, panel %q: %w", path, p.Title, err)
				}
				queries = append(queries, query{Title: p.Title, Expr: expr})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	for node := range ast.Preorder(file) {
		lit, ok := node.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			continue
		}
		text, err := strconv.Unquote(lit.Value)
		if err != nil || !strings.HasPrefix(strings.TrimSpace(text), "{") || !strings.Contains(text, `"panels"`) {
			continue
		}
		var board dashboard
		if err := json.Unmarshal([]byte(text), &board); err != nil {
			return nil, fmt.Errorf("the dashboard at %s is not JSON: %w", files.Position(lit.Pos()), err)
		}
		boards++
		if err := walk(board.Panels); err != nil {
			return nil, err
		}
	}
	if boards == 0 {
		return nil, fmt.Errorf("the template %s holds no dashboard", path)
	}
	return queries, nil
}

// variable is a Grafana variable: $name, ${name} or [[name]].
var variable = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)|\[\[(\w+)\]\]`)

func substitute(expr string, target labels.Labels) (string, error) {
	var unknown []string
	out := variable.ReplaceAllStringFunc(expr, func(match string) string {
		parts := variable.FindStringSubmatch(match)
		name := parts[1] + parts[2] + parts[3]
		if !target.Has(name) {
			unknown = append(unknown, "$"+name)
			return match
		}
		return target.Get(name)
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("no --label gives the dashboard variable %s", strings.Join(unknown, ", "))
	}
	return out, nil
}

// ingest parses a scrape with Prometheus' parser for its content type and
// stores its samples at `at`, with the target labels, as Prometheus' scrape
// loop does (honor_labels false: an exposed label of a target label's name
// is kept as exported_<name>). A series of the previous scrape that this one
// lacks is marked stale, as the scrape loop marks it. It returns this
// scrape's series.
func ingest(ctx context.Context, db storage.AppendableV2, path, contentType string, target labels.Labels, at time.Time, previous map[uint64]labels.Labels) (map[uint64]labels.Labels, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the scrape %s: %w", path, err)
	}
	p, err := textparse.New(data, contentType, labels.NewSymbolTable(), textparse.ParserOptions{})
	if p == nil {
		return nil, fmt.Errorf("no Prometheus parser reads --content-type %q: %v", contentType, err)
	}
	app := db.AppenderV2(ctx)
	ts := at.UnixMilli()
	present := map[uint64]labels.Labels{}
	var exposed labels.Labels
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			_ = app.Rollback()
			return nil, fmt.Errorf("the scrape %s does not parse as %s: %w", path, contentType, err)
		}
		var v float64
		var h *histogram.Histogram
		var fh *histogram.FloatHistogram
		switch entry {
		case textparse.EntrySeries:
			_, _, v = p.Series()
		case textparse.EntryHistogram:
			_, _, h, fh = p.Histogram()
		default:
			continue
		}
		p.Labels(&exposed)
		series := withTarget(exposed, target)
		if _, err := app.Append(0, series, 0, ts, v, h, fh, storage.AppendV2Options{}); err != nil {
			_ = app.Rollback()
			return nil, fmt.Errorf("the scrape %s: cannot store %s: %w", path, series, err)
		}
		present[series.Hash()] = series
	}
	for hash, series := range previous {
		if _, ok := present[hash]; ok {
			continue
		}
		stale := math.Float64frombits(value.StaleNaN)
		if _, err := app.Append(0, series, 0, ts, stale, nil, nil, storage.AppendV2Options{}); err != nil {
			_ = app.Rollback()
			return nil, fmt.Errorf("the scrape %s: cannot mark %s stale: %w", path, series, err)
		}
	}
	if err := app.Commit(); err != nil {
		return nil, fmt.Errorf("the scrape %s: cannot store its samples: %w", path, err)
	}
	return present, nil
}

// withTarget sets the target labels on an exposed series as Prometheus'
// scrape loop does by default: the target's value wins, and the exposed
// value is kept as exported_<name> (exported_exported_<name> if that is
// taken, and so on), the shortest names first.
func withTarget(exposed, target labels.Labels) labels.Labels {
	b := labels.NewBuilder(exposed)
	var conflicts []labels.Label
	target.Range(func(l labels.Label) {
		if old := exposed.Get(l.Name); old != "" {
			conflicts = append(conflicts, labels.Label{Name: l.Name, Value: old})
		}
		b.Set(l.Name, l.Value)
	})
	slices.SortStableFunc(conflicts, func(a, b labels.Label) int { return len(a.Name) - len(b.Name) })
	for _, l := range conflicts {
		name := model.ExportedLabelPrefix + l.Name
		for b.Get(name) != "" {
			name = model.ExportedLabelPrefix + name
		}
		b.Set(name, l.Value)
	}
	return b.Labels()
}

// evaluate runs expr as an instant query at `at` and counts its series.
func evaluate(ctx context.Context, engine *promql.Engine, db storage.Queryable, expr string, at time.Time) (int, error) {
	q, err := engine.NewInstantQuery(ctx, db, nil, expr, at)
	if err != nil {
		return 0, err
	}
	defer q.Close()
	result := q.Exec(ctx)
	if result.Err != nil {
		return 0, result.Err
	}
	switch v := result.Value.(type) {
	case promql.Vector:
		return len(v), nil
	case promql.Matrix:
		return len(v), nil
	default:
		return 1, nil
	}
}
