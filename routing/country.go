package routing

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// isoCodes is the ISO 3166-1 alpha-2 list of officially assigned codes (249).
const isoCodes = "AD AE AF AG AI AL AM AO AQ AR AS AT AU AW AX AZ " +
	"BA BB BD BE BF BG BH BI BJ BL BM BN BO BQ BR BS BT BV BW BY BZ " +
	"CA CC CD CF CG CH CI CK CL CM CN CO CR CU CV CW CX CY CZ " +
	"DE DJ DK DM DO DZ " +
	"EC EE EG EH ER ES ET " +
	"FI FJ FK FM FO FR " +
	"GA GB GD GE GF GG GH GI GL GM GN GP GQ GR GS GT GU GW GY " +
	"HK HM HN HR HT HU " +
	"ID IE IL IM IN IO IQ IR IS IT " +
	"JE JM JO JP " +
	"KE KG KH KI KM KN KP KR KW KY KZ " +
	"LA LB LC LI LK LR LS LT LU LV LY " +
	"MA MC MD ME MF MG MH MK ML MM MN MO MP MQ MR MS MT MU MV MW MX MY MZ " +
	"NA NC NE NF NG NI NL NO NP NR NU NZ " +
	"OM " +
	"PA PE PF PG PH PK PL PM PN PR PS PT PW PY " +
	"QA " +
	"RE RO RS RU RW " +
	"SA SB SC SD SE SG SH SI SJ SK SL SM SN SO SR SS ST SV SX SY SZ " +
	"TC TD TF TG TH TJ TK TL TM TN TO TR TT TV TW TZ " +
	"UA UG UM US UY UZ " +
	"VA VC VE VG VI VN VU " +
	"WF WS " +
	"YE YT " +
	"ZA ZM ZW"

// eeaCodes is the built-in "eu" residency class: the European Economic
// Area (the EU27 plus Iceland, Liechtenstein and Norway) and the parts of
// the EU that have ISO 3166-1 codes of their own (euTerritories), where
// the GDPR applies as in the rest of their member state: a CDN's country
// header names them by those codes.
const eeaCodes = "AT BE BG HR CY CZ DK EE FI FR DE GR HU IE IT LV LT LU MT NL PL PT RO SK SI ES SE IS LI NO " +
	"AX GF GP MF MQ RE YT"

// euTerritories maps each part of the EU with an ISO 3166-1 code of its
// own to its member state: Åland (Finland); French Guiana, Guadeloupe,
// Saint-Martin, Martinique, Réunion and Mayotte (France). The Canary
// Islands, Ceuta, Melilla, the Azores and Madeira have no assigned code
// (a header names them ES or PT).
var euTerritories = map[string]string{"AX": "FI", "GF": "FR", "GP": "FR", "MF": "FR", "MQ": "FR", "RE": "FR", "YT": "FR"}

// Unknown is the pseudo-country that every empty, invalid or unassigned
// country code normalizes to. Its effective entry is keyed "_unknown".
const Unknown = "_unknown"

// countryIndex maps a two-letter upper-case code to its position in
// Countries()+1; zero means "not an assigned code".
var countryIndex [26 * 26]uint16

var countries []string

// numCountries is len(Countries()), as a constant for array types.
const numCountries = 249

func init() {
	countries = strings.Fields(isoCodes)
	if len(countries) != numCountries {
		panic("routing: numCountries is not the number of ISO codes")
	}
	for i, c := range countries {
		countryIndex[int(c[0]-'A')*26+int(c[1]-'A')] = uint16(i + 1)
	}
}

// Countries returns every ISO 3166-1 alpha-2 code in alphabetical order.
// The slice is shared; callers must not modify it.
func Countries() []string { return countries }

// EEA returns the countries of the built-in "eu" residency class: the EEA
// and the parts of the EU with ISO codes of their own (eeaCodes).
func EEA() []string { return slices.Clone(eea) }

var eea = strings.Fields(eeaCodes)

// ResidencyGaps names what of the EEA r leaves in no class while it puts
// some of the EEA in one (a class copied short, a member state dropped
// from it): the member states in no class, in one line naming the
// classes that hold the others; and, one line per code, the parts of the
// EU with codes of their own (Réunion RE, Åland AX, …) in no class while
// their member state is in one. Their viewers may be sent to pools of any
// residency, although the GDPR applies there. The first line ends with
// ShrinkRefusedNote. Sorted; none for the built-in default, nor for a
// policy that puts no EEA country in a class.
func ResidencyGaps(r Residency) []string {
	classOf := map[string]string{} // the first class by name, for a country in two
	for _, name := range slices.Sorted(maps.Keys(r.Classes)) {
		for _, cc := range r.Classes[name] {
			if _, ok := classOf[cc]; !ok {
				classOf[cc] = name
			}
		}
	}
	var out []string
	var missing []string
	holders := map[string]bool{}
	for _, cc := range eea {
		if _, territory := euTerritories[cc]; territory {
			continue
		}
		if c, ok := classOf[cc]; ok {
			holders[c] = true
		} else {
			missing = append(missing, cc)
		}
	}
	if len(missing) > 0 && len(holders) > 0 {
		slices.Sort(missing)
		held := "class " + strings.Join(slices.Sorted(maps.Keys(holders)), ", ") + " holds"
		if len(holders) > 1 {
			held = "classes " + strings.Join(slices.Sorted(maps.Keys(holders)), ", ") + " hold"
		}
		out = append(out, fmt.Sprintf("%d of the %d EEA member states are in no class (%s) while %s the others: their viewers may be sent to pools of any residency; add them (the built-in policy's class eu holds the EEA and the EU's territories: docs/keys-and-values.md)",
			len(missing), len(eea)-len(euTerritories), strings.Join(missing, ", "), held))
	}
	for _, t := range slices.Sorted(maps.Keys(euTerritories)) {
		state := euTerritories[t]
		if c, ok := classOf[state]; ok && classOf[t] == "" {
			out = append(out, fmt.Sprintf("%s (part of %s) is in no class while %s is in class %s: its viewers may be sent to any pool; add %s to class %s",
				t, state, state, c, t, c))
		}
	}
	if len(out) > 0 { // once: the first line says it for all
		out[0] += "; " + ShrinkRefusedNote
	}
	return out
}

// ShrinkRefusedNote ends each warning of a code left in no class: a
// write of such a policy that takes a code out of its class is refused
// (regionctl's check of ResidencyChanges), though the policy is valid.
const ShrinkRefusedNote = "a write (apply, rollback) whose policy takes a code out of the class the stored policy puts it in (with none stored, the built-in one) is refused unless given --allow-residency-change"

// Warnings names what in cfg is valid but likely not what its author
// meant, one line each: the parts of the EU its policy leaves in no class
// (ResidencyGaps), a code listed twice in a class, a class with no
// countries, no EEA member state in any class while pools have residency
// eu, fallbacks on _default, which only a chain naming
// _default follows (a country without a route of its own, and the unknown
// country, use _default's targets alone), and fallbacks that residency
// keeps from ever serving a country whose chain holds them.
func Warnings(cfg *Config) []string {
	var out []string
	if r := cfg.Policy.Residency; r != nil {
		for _, g := range ResidencyGaps(*r) {
			out = append(out, "policy/residency: "+g)
		}
		for _, class := range slices.Sorted(maps.Keys(r.Classes)) {
			seen := map[string]bool{}
			for _, cc := range r.Classes[class] {
				if seen[cc] {
					out = append(out, fmt.Sprintf("policy/residency: %s is listed twice in class %s", cc, class))
				}
				seen[cc] = true
			}
			if len(r.Classes[class]) == 0 {
				out = append(out, fmt.Sprintf("policy/residency: class %s lists no countries (an empty list, or a template that rendered none): no country's viewers are held to its pools", class))
			}
		}
		if eu := poolsOfResidency(cfg, "eu"); len(eu) > 0 && !slices.ContainsFunc(eea, func(cc string) bool { c, _ := classFor(*r, cc); return c != "" }) {
			out = append(out, fmt.Sprintf("policy/residency: no EEA member state is in a class while pools have residency eu (%s): EEA viewers may be sent to pools of any residency (the built-in policy's class eu holds the EEA and the EU's territories: docs/keys-and-values.md); %s",
				strings.Join(eu, ", "), ShrinkRefusedNote))
		}
	}
	if d, ok := cfg.Routes[DefaultRoute]; ok && len(d.Fallback) > 0 {
		out = append(out, fmt.Sprintf("routes/_default: fallback %s is followed only by chains that name _default; countries without a route of their own, and the unknown country, use _default's targets alone",
			strings.Join(d.Fallback, ", ")))
	}
	return append(out, fallbacksNeverServing(cfg)...)
}

// poolsOfResidency returns the ids of cfg's pools of residency class, in
// order.
func poolsOfResidency(cfg *Config, class string) []string {
	var ids []string
	for _, id := range slices.Sorted(maps.Keys(cfg.Pools)) {
		if cfg.Pools[id].Residency == class {
			ids = append(ids, id)
		}
	}
	return ids
}

// fallbacksNeverServing names, for each country route whose country has a
// residency class, the fallbacks of its chain (other than _default) none
// of whose pools is of that class: residency passes over every target, so
// the fallback never serves the country (it reads as a safety net that
// is not there).
func fallbacksNeverServing(cfg *Config) []string {
	pol := cfg.ResidencyOrDefault()
	var out []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Routes)) {
		class, ok := classFor(pol, name)
		if !ok || class == "" {
			continue
		}
		seen := map[string]bool{name: true}
		var walk func(r Route)
		walk = func(r Route) {
			for _, f := range r.Fallback {
				fr, ok := cfg.Routes[f]
				if seen[f] || f == DefaultRoute || !ok {
					continue
				}
				seen[f] = true
				var pools []string
				serves := false
				for _, tg := range fr.Targets {
					pools = append(pools, tg.Pool)
					if p, ok := cfg.Pools[tg.Pool]; ok && p.Residency == class {
						serves = true
					}
				}
				if !serves && len(pools) > 0 {
					out = append(out, fmt.Sprintf("routes/%s: fallback %s can never serve %s (class %s): none of its pools (%s) is of class %s",
						name, f, name, class, strings.Join(pools, ", "), class))
				}
				walk(fr)
			}
		}
		walk(cfg.Routes[name])
	}
	return out
}

// notAssigned names the codes often taken for countries that are not
// assigned ISO 3166-1 alpha-2 codes, with the code meant.
var notAssigned = map[string]string{
	"UK": "the United Kingdom's code is GB",
	"EL": "Greece's code is GR; EL is the EU's abbreviation",
	"EU": "EU is not a country: list the member states, or leave policy/residency out for the built-in class eu",
	"XK": "XK (Kosovo) is user-assigned, not an ISO code: a CDN's XK header resolves as " + Unknown,
}

// CountryHint is what to say of s, refused as a country code: " (did you
// mean AT? codes are upper case)", " (the United Kingdom's code is GB)";
// "" when there is nothing to add.
func CountryHint(s string) string {
	up := strings.ToUpper(s)
	if h, ok := notAssigned[up]; ok {
		return " (" + h + ")"
	}
	if up != s && IsCountry(up) {
		return " (did you mean " + up + "? codes are upper case)"
	}
	return ""
}

// IsCountry reports whether s is an assigned ISO 3166-1 alpha-2 code in
// upper case.
func IsCountry(s string) bool { return countryID(s) >= 0 }

// countryID returns the index of an exact upper-case code in Countries(),
// or -1.
func countryID(s string) int {
	if len(s) != 2 || s[0] < 'A' || s[0] > 'Z' || s[1] < 'A' || s[1] > 'Z' {
		return -1
	}
	return int(countryIndex[int(s[0]-'A')*26+int(s[1]-'A')]) - 1
}

// NormalizeCountry turns a raw country header ("pl", " PL ", "XX", "T1", "")
// into an assigned upper-case ISO code, or Unknown. It never allocates.
func NormalizeCountry(raw string) string {
	id := normalizeID(raw)
	if id < 0 {
		return Unknown
	}
	return countries[id]
}

// normalizeID is NormalizeCountry returning the index into Countries(), or -1.
func normalizeID(raw string) int {
	for len(raw) > 0 && isSpace(raw[0]) {
		raw = raw[1:]
	}
	for len(raw) > 0 && isSpace(raw[len(raw)-1]) {
		raw = raw[:len(raw)-1]
	}
	if len(raw) != 2 {
		return -1
	}
	a, b := upper(raw[0]), upper(raw[1])
	if a < 'A' || a > 'Z' || b < 'A' || b > 'Z' {
		return -1
	}
	return int(countryIndex[int(a-'A')*26+int(b-'A')]) - 1
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}
