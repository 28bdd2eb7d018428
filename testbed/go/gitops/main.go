// Command gitops-check reports how two GitOps controllers judge the health of Kubernetes objects.
//
// Usage: gitops-check --lua health.lua [--open-libs] < objects.json > verdicts.json
//
// stdin is a JSON array of complete objects; stdout is a JSON array with one entry per object, in order:
// {"name": ..., "kstatus": {"status", "message"}, "argocd": {"status", "message"}}.
//
// kstatus is sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute itself, the library Flux, kpt and
// cli-utils use. When Compute fails the verdict is Unknown with the error as message, which is what
// cli-utils' status readers (pkg/kstatus/polling/statusreaders) report.
//
// The Argo CD verdict is a resource health check in Lua, run the way Argo CD runs a custom check from
// argocd-cm (resource.customizations.health.<group_kind>; --open-libs is its useOpenLibs: true).
// Argo CD is not imported (its module graph is huge); this file re-implements, with the gopher-lua
// and gopher-json versions Argo CD pins in its go.mod, what these files do at argoproj/argo-cd commit
// 37ee0097cf851bc2dd7665fc081bbce61a7e836e (2026-08-22):
//   - util/lua/lua.go: VM.runLuaWithResourceActionParameters (the Lua state, its libraries, the `obj`
//     global built by decodeValue, the 1 s timeout, no stack trace on run errors) and
//     VM.ExecuteHealthLua (how the returned table becomes status and message);
//   - util/lua/oslib_safe.go: the "safe" os library (time and date only);
//   - gitops-engine/pkg/health/health.go: GetResourceHealth's check for objects being deleted.
//
// Where Argo CD turns an error into health Unknown (a Lua error, a script returning neither a table
// nor nil), this program prints the error and exits 1 instead, so a broken script cannot pass a test.
// Bad input does the same.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	luajson "layeh.com/gopher-json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type health struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

type verdict struct {
	Name    string `json:"name"`
	Kstatus health `json:"kstatus"`
	Argocd  health `json:"argocd"`
}

func main() {
	scriptPath := flag.String("lua", "", "path of the Lua health script (Argo CD health.lua)")
	openLibs := flag.Bool("open-libs", false, "open every Lua standard library (Argo CD's useOpenLibs)")
	flag.Parse()
	if *scriptPath == "" || flag.NArg() != 0 {
		fail(errors.New("usage: gitops-check --lua <health.lua> [--open-libs] < objects.json"))
	}
	script, err := os.ReadFile(*scriptPath)
	if err != nil {
		fail(err)
	}
	var raw []json.RawMessage
	if err := json.NewDecoder(os.Stdin).Decode(&raw); err != nil {
		fail(fmt.Errorf("reading the objects from stdin: %w", err))
	}
	verdicts := make([]verdict, 0, len(raw))
	for index, item := range raw {
		// Decoding as the API machinery does keeps integers int64, which kstatus's NestedInt64 needs.
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(item); err != nil {
			fail(fmt.Errorf("object %d: %w", index, err))
		}
		argo, err := argoHealth(obj, string(script), *openLibs)
		if err != nil {
			fail(fmt.Errorf("object %d (%s %s): Argo CD health check: %w", index, obj.GetKind(), obj.GetName(), err))
		}
		verdicts = append(verdicts, verdict{Name: obj.GetName(), Kstatus: kstatus(obj), Argocd: argo})
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(verdicts); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gitops-check:", err)
	os.Exit(1)
}

func kstatus(obj *unstructured.Unstructured) health {
	result, err := status.Compute(obj)
	if err != nil {
		return health{Status: string(status.UnknownStatus), Message: err.Error()}
	}
	return health{Status: string(result.Status), Message: result.Message}
}

// Argo CD's health codes (gitops-engine/pkg/health); any other status a script returns is replaced.
var argoHealthCodes = []string{"Unknown", "Progressing", "Healthy", "Suspended", "Degraded", "Missing"}

const argoInvalidStatus = "Lua returned an invalid health status"

func argoHealth(obj *unstructured.Unstructured, script string, openLibs bool) (health, error) {
	// gitops-engine answers this before it looks for a health check; hook finalizers hold it back.
	if obj.GetDeletionTimestamp() != nil && !slices.Contains(obj.GetFinalizers(), "argocd.argoproj.io/hook-finalizer") {
		return health{Status: "Progressing", Message: "Pending deletion"}, nil
	}
	l := newArgoState(openLibs)
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // Argo CD's limit per script run
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("actionParams", l.NewTable()) // health checks get no action parameters, but the global exists
	l.SetGlobal("obj", toLua(l, obj.Object))
	fn, err := l.LoadString(script)
	if err == nil {
		l.Push(fn)
		err = l.PCall(0, lua.MultRet, nil)
	}
	var apiErr *lua.ApiError
	if errors.As(err, &apiErr) && apiErr.Type == lua.ApiErrorRun {
		apiErr.StackTrace = "" // Argo CD shows users the message without gopher-lua's traceback
	}
	if err != nil {
		return health{}, err
	}
	returned := l.Get(-1)
	switch returned.Type() {
	case lua.LTNil:
		return health{}, nil
	case lua.LTTable:
	default:
		return health{}, fmt.Errorf("expect table output from Lua script, not %s", returned.Type())
	}
	// Argo CD goes through JSON rather than reading fields, so a non-string status or an empty
	// table (gopher-json encodes it as []) yields an empty health, and an unencodable table an error.
	encoded, err := luajson.Encode(returned)
	if err != nil {
		return health{}, err
	}
	var result health
	if err := json.Unmarshal(encoded, &result); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return health{}, nil
		}
		return health{}, err
	}
	if !slices.Contains(argoHealthCodes, result.Status) {
		return health{Status: "Unknown", Message: argoInvalidStatus}, nil
	}
	return result, nil
}

// newArgoState returns a Lua state with the libraries Argo CD gives a health script.
func newArgoState(openLibs bool) *lua.LState {
	l := lua.NewState(lua.Options{SkipOpenLibs: !openLibs})
	openers := []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		// Argo CD's OpenSafeOs registers its functions under the table library's name, which is
		// loaded by then, so it adds nothing: a script has no global `os` (unless --open-libs)
		// and reaches the safe one through require("os") (the preload below). Kept as Argo has it.
		{lua.OsLibName, func(l *lua.LState) int {
			l.Push(l.RegisterModule(lua.TabLibName, safeOsFunctions))
			return 1
		}},
	}
	for _, opener := range openers {
		call := lua.P{Fn: l.NewFunction(opener.open), NRet: 0, Protect: true}
		if err := l.CallByParam(call, lua.LString(opener.name)); err != nil {
			panic(err)
		}
	}
	l.PreloadModule(lua.OsLibName, func(l *lua.LState) int {
		l.Push(l.SetFuncs(l.NewTable(), safeOsFunctions))
		return 1
	})
	return l
}

// toLua converts an object's JSON value as Argo CD's decodeValue does (unknown types become nil).
func toLua(l *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case nil:
		return lua.LNil
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case []any:
		array := l.CreateTable(len(v), 0)
		for _, item := range v {
			array.Append(toLua(l, item))
		}
		return array
	case map[string]any:
		table := l.CreateTable(0, len(v))
		for key, item := range v {
			table.RawSetH(lua.LString(key), toLua(l, item))
		}
		return table
	default:
		return lua.LNil
	}
}

// safeOsFunctions is the subset of Lua's os library Argo CD allows: no exit, files or environment.
var safeOsFunctions = map[string]lua.LGFunction{"time": osTime, "date": osDate}

// osTime is os.time([table]): now, or the local time a table of fields describes (hour defaults to 12).
func osTime(l *lua.LState) int {
	if l.GetTop() == 0 {
		l.Push(lua.LNumber(time.Now().Unix()))
		return 1
	}
	fields := l.CheckTable(1)
	field := func(name string, fallback int) int {
		if n, ok := fields.RawGetString(name).(lua.LNumber); ok {
			return int(n)
		}
		return fallback
	}
	when := time.Date(field("year", -1), time.Month(field("month", -1)), field("day", -1),
		field("hour", 12), field("min", 0), field("sec", 0), 0, time.Local)
	l.Push(lua.LNumber(when.Unix()))
	return 1
}

// osDate is os.date([format [, time]]) with Argo CD's quirks: "!" asks for UTC unless a time is given,
// "*t" returns a table (yday 0, isdst false), and the default format is "%c".
func osDate(l *lua.LState) int {
	when, format := time.Now(), "%c"
	if l.GetTop() >= 1 {
		format = l.CheckString(1)
		if strings.HasPrefix(format, "!") {
			when, format = time.Now().UTC(), strings.TrimLeft(format, "!")
		}
		if l.GetTop() >= 2 {
			when = time.Unix(l.CheckInt64(2), 0)
		}
		if strings.HasPrefix(format, "*t") {
			table := l.NewTable()
			for name, value := range map[string]int{
				"year": when.Year(), "month": int(when.Month()), "day": when.Day(), "hour": when.Hour(),
				"min": when.Minute(), "sec": when.Second(), "wday": int(when.Weekday()) + 1, "yday": 0,
			} {
				table.RawSetString(name, lua.LNumber(value))
			}
			table.RawSetString("isdst", lua.LFalse)
			l.Push(table)
			return 1
		}
	}
	l.Push(lua.LString(strftime(when, format)))
	return 1
}

// strftimeLayouts maps a strftime conversion to a Go layout, as Argo CD's table does (including
// its %a, which prints a literal "mon", and its %x, which prints the time).
var strftimeLayouts = map[byte]string{
	'a': "mon", 'A': "Monday", 'b': "Jan", 'B': "January", 'c': "02 Jan 06 15:04 MST",
	'd': "02", 'F': "2006-01-02", 'H': "15", 'I': "03", 'm': "01", 'M': "04", 'p': "PM",
	'P': "pm", 'S': "05", 'x': "15/04/05", 'X': "15:04:05", 'y': "06", 'Y': "2006",
	'z': "-0700", 'Z': "MST",
}

// strftime formats `when`: %% is a percent sign, %w the weekday number, an unknown conversion and a
// trailing lone % are kept as written.
func strftime(when time.Time, format string) string {
	var out strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i == len(format)-1 {
			out.WriteByte(format[i])
			continue
		}
		i++
		conversion := format[i]
		if layout, ok := strftimeLayouts[conversion]; ok {
			out.WriteString(when.Format(layout))
		} else if conversion == 'w' {
			out.WriteString(strconv.Itoa(int(when.Weekday())))
		} else if conversion == '%' {
			out.WriteByte('%')
		} else {
			out.WriteByte('%')
			out.WriteByte(conversion)
		}
	}
	return out.String()
}
