package objective

import (
	"strings"
	"testing"
)

func TestSchemaValidate(t *testing.T) {
	person := jsonCases[0].Schema
	order := jsonCases[5].Schema
	tests := []struct {
		name    string
		schema  string
		doc     string
		wantErr string // substring; "" = valid
	}{
		{"person ok", person, `{"name":"Ada","age":36,"email":"a@b.c"}`, ""},
		{"missing required", person, `{"name":"Ada","age":36}`, `missing required "email"`},
		{"extra property", person, `{"name":"Ada","age":36,"email":"x","x":1}`, `unexpected property "x"`},
		{"wrong type", person, `{"name":"Ada","age":"36","email":"x"}`, "want integer, got string"},
		{"not integer", person, `{"name":"Ada","age":36.5,"email":"x"}`, "want integer"},
		{"above maximum", person, `{"name":"Ada","age":151,"email":"x"}`, "> maximum"},
		{"below minimum", person, `{"name":"Ada","age":-1,"email":"x"}`, "< minimum"},
		{"empty string", person, `{"name":"","age":3,"email":"x"}`, "< minLength"},
		{"not JSON", person, `{"name":`, "not JSON"},
		{"not an object", person, `[1]`, "want object, got array"},
		{"enum ok", jsonCases[1].Schema, `{"city":"Paris","temperature_c":12.5,"condition":"rain"}`, ""},
		{"enum bad", jsonCases[1].Schema, `{"city":"Paris","temperature_c":12.5,"condition":"hail"}`, "not in enum"},
		{"nested ok", order, `{"order_id":"o1","items":[{"sku":"a","quantity":2}],"paid":false}`, ""},
		{"nested item bad", order, `{"order_id":"o1","items":[{"sku":"a","quantity":0}],"paid":false}`, "$.items[0].quantity"},
		{"too few items", order, `{"order_id":"o1","items":[],"paid":true}`, "< minItems"},
		{"boolean wrong", order, `{"order_id":"o1","items":[{"sku":"a","quantity":1}],"paid":"yes"}`, "want boolean"},
		{"too many items", jsonCases[4].Schema, `{"title":"t","author":"a","year":1999,"genres":["a","b","c","d","e","f"]}`, "> maxItems"},
		{"null type", `{"type":"null"}`, `null`, ""},
		{"unsupported type", `{"type":"tuple"}`, `1`, "unsupported"},
		{"max length", `{"type":"string","maxLength":2}`, `"abc"`, "> maxLength"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := mustSchema(tt.schema).ValidateJSON(tt.doc)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("want valid, got %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckToolCall(t *testing.T) {
	tests := []struct {
		name    string
		calls   []toolCall
		want    string
		wantErr string
	}{
		{"ok", []toolCall{{"get_weather", `{"city":"Berlin","unit":"celsius"}`}}, "get_weather", ""},
		{"no call", nil, "get_weather", "no tool call"},
		{"wrong function", []toolCall{{"set_timer", `{"minutes":5}`}}, "get_weather", "called \"set_timer\""},
		{"bad arguments JSON", []toolCall{{"set_timer", `{"minutes":`}}, "set_timer", "not JSON"},
		{"argument out of range", []toolCall{{"set_timer", `{"minutes":0}`}}, "set_timer", "< minimum"},
		{"undeclared argument", []toolCall{{"set_timer", `{"minutes":5,"sound":"bell"}`}}, "set_timer", "unexpected property"},
		{"missing argument", []toolCall{{"convert_currency", `{"amount":5,"from":"USD"}`}}, "convert_currency", "missing required \"to\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkToolCall(tt.calls, tt.want)
			if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestMergeToolCalls(t *testing.T) {
	var calls []toolCall
	for _, frag := range []string{
		`[{"id":"call_1","index":0,"type":"function","function":{"name":"set_timer","arguments":""}}]`,
		`[{"id":null,"index":0,"type":"function","function":{"name":null,"arguments":"{\"minutes\":"}}]`,
		`[{"index":0,"function":{"arguments":" 5}"}}]`,
	} {
		calls = mergeToolCalls(calls, []byte(frag))
	}
	if len(calls) != 1 || calls[0].Name != "set_timer" || calls[0].Arguments != `{"minutes": 5}` {
		t.Errorf("merged %+v", calls)
	}
}
