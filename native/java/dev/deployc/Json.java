package dev.deployc;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The JSON the native side hands over (a bundle's description, a run's result, a self-test's report), read
 * into plain Java values: objects as {@code Map<String, Object>} (keys in order), arrays as {@code List<Object>},
 * numbers as {@code Double} (or {@code Long} when written without a fraction or exponent), strings, booleans
 * and null. Enough of RFC 8259 for what the runtime writes; no dependency an Android app would have to carry.
 */
public final class Json {
    private final String text;
    private int pos;

    private Json(String text) {
        this.text = text;
    }

    /** Parses one JSON value; IllegalArgumentException names the offset of what is malformed. */
    public static Object parse(String text) {
        Json p = new Json(text);
        Object value = p.value();
        p.space();
        if (p.pos != text.length()) {
            throw p.error("trailing characters");
        }
        return value;
    }

    private IllegalArgumentException error(String what) {
        return new IllegalArgumentException("malformed JSON at offset " + pos + ": " + what);
    }

    private void space() {
        while (pos < text.length() && " \t\r\n".indexOf(text.charAt(pos)) >= 0) {
            pos++;
        }
    }

    private Object value() {
        space();
        if (pos >= text.length()) {
            throw error("unexpected end");
        }
        char c = text.charAt(pos);
        switch (c) {
            case '{':
                return object();
            case '[':
                return array();
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", null);
            default:
                return number();
        }
    }

    private Object literal(String word, Object value) {
        if (!text.startsWith(word, pos)) {
            throw error("expected " + word);
        }
        pos += word.length();
        return value;
    }

    private Map<String, Object> object() {
        Map<String, Object> out = new LinkedHashMap<>();
        pos++;
        space();
        if (pos < text.length() && text.charAt(pos) == '}') {
            pos++;
            return Collections.unmodifiableMap(out);
        }
        while (true) {
            space();
            if (pos >= text.length() || text.charAt(pos) != '"') {
                throw error("expected a key");
            }
            String key = string();
            space();
            expect(':');
            out.put(key, value());
            space();
            if (pos < text.length() && text.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect('}');
            return Collections.unmodifiableMap(out);
        }
    }

    private List<Object> array() {
        List<Object> out = new ArrayList<>();
        pos++;
        space();
        if (pos < text.length() && text.charAt(pos) == ']') {
            pos++;
            return Collections.unmodifiableList(out);
        }
        while (true) {
            out.add(value());
            space();
            if (pos < text.length() && text.charAt(pos) == ',') {
                pos++;
                continue;
            }
            expect(']');
            return Collections.unmodifiableList(out);
        }
    }

    private void expect(char c) {
        if (pos >= text.length() || text.charAt(pos) != c) {
            throw error("expected '" + c + "'");
        }
        pos++;
    }

    private String string() {
        StringBuilder out = new StringBuilder();
        pos++;
        while (true) {
            if (pos >= text.length()) {
                throw error("unterminated string");
            }
            char c = text.charAt(pos++);
            if (c == '"') {
                return out.toString();
            }
            if (c != '\\') {
                out.append(c);
                continue;
            }
            if (pos >= text.length()) {
                throw error("unterminated escape");
            }
            char e = text.charAt(pos++);
            switch (e) {
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u':
                    if (pos + 4 > text.length()) {
                        throw error("short \\u escape");
                    }
                    try {
                        out.append((char) Integer.parseInt(text.substring(pos, pos + 4), 16));
                    } catch (NumberFormatException ex) {
                        throw error("bad \\u escape");
                    }
                    pos += 4;
                    break;
                default: out.append(e);
            }
        }
    }

    private Object number() {
        int start = pos;
        boolean integral = true;
        while (pos < text.length() && "+-0123456789.eE".indexOf(text.charAt(pos)) >= 0) {
            integral &= ".eE".indexOf(text.charAt(pos)) < 0;
            pos++;
        }
        String s = text.substring(start, pos);
        if (s.isEmpty()) {
            throw error("unexpected '" + text.charAt(pos) + "'");
        }
        try {
            return integral ? (Object) Long.valueOf(s) : (Object) Double.valueOf(s);
        } catch (NumberFormatException ex) {
            throw error("bad number " + s);
        }
    }

    /** A JSON string of {@code s}, quoted and escaped (for apps and tests that write JSON back). */
    public static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
