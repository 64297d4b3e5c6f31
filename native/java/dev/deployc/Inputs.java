package dev.deployc;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.zip.CRC32;
import java.util.zip.Deflater;

/**
 * A pipeline's named inputs for one {@link Bundle#run}: text, an image (PNG or JPEG file bytes, or ARGB
 * pixels as Android's {@code Bitmap.getPixels} gives them) or audio (WAV file bytes, or mono float samples).
 * Each is checked against the type the bundle declares for that input. Pixels and samples are handed to the
 * runtime as a lossless PNG and a float32 WAV, the files its decoders read: the same preprocessing as a file.
 */
public final class Inputs {
    static final class Entry {
        final String name;
        final String kind;
        final byte[] value;

        Entry(String name, String kind, byte[] value) {
            this.name = name;
            this.kind = kind;
            this.value = value;
        }
    }

    private final List<Entry> entries = new ArrayList<>();

    public Inputs text(String name, String text) {
        return add(name, "text", text.getBytes(StandardCharsets.UTF_8));
    }

    /** A PNG or JPEG file's bytes. */
    public Inputs image(String name, byte[] encoded) {
        return add(name, "image", encoded.clone());
    }

    /** Pixels as 0xAARRGGBB ints, row by row (alpha is dropped, as the runtime drops it from a PNG). */
    public Inputs image(String name, int[] argb, int width, int height) {
        if (width <= 0 || height <= 0 || argb.length != (long) width * height) {
            throw new IllegalArgumentException("image " + name + ": " + argb.length + " pixels are not " + width
                    + " x " + height);
        }
        return add(name, "image", png(argb, width, height));
    }

    /** A WAV file's bytes (PCM 8/16/24/32-bit or float32, any rate: the pipeline resamples). */
    public Inputs audio(String name, byte[] wav) {
        return add(name, "audio", wav.clone());
    }

    /** Mono samples in [-1, 1] at {@code sampleRate} Hz. */
    public Inputs audio(String name, float[] samples, int sampleRate) {
        if (sampleRate <= 0) {
            throw new IllegalArgumentException("audio " + name + ": sample rate " + sampleRate);
        }
        return add(name, "audio", wav(samples, sampleRate));
    }

    private Inputs add(String name, String kind, byte[] value) {
        for (Entry e : entries) {
            if (e.name.equals(name)) {
                throw new IllegalArgumentException("input " + name + " is given twice");
            }
        }
        entries.add(new Entry(name, kind, value));
        return this;
    }

    List<Entry> entries() {
        return Collections.unmodifiableList(entries);
    }

    /** A float32 mono WAV file (format 3, IEEE float). */
    public static byte[] wav(float[] samples, int sampleRate) {
        int data = samples.length * 4;
        ByteBuffer b = ByteBuffer.allocate(44 + data).order(ByteOrder.LITTLE_ENDIAN);
        b.put("RIFF".getBytes(StandardCharsets.US_ASCII)).putInt(36 + data).put("WAVE".getBytes(StandardCharsets.US_ASCII));
        b.put("fmt ".getBytes(StandardCharsets.US_ASCII)).putInt(16).putShort((short) 3).putShort((short) 1);
        b.putInt(sampleRate).putInt(sampleRate * 4).putShort((short) 4).putShort((short) 32);
        b.put("data".getBytes(StandardCharsets.US_ASCII)).putInt(data);
        for (float s : samples) {
            b.putFloat(s);
        }
        return b.array();
    }

    /** An 8-bit RGB PNG of ARGB pixels (java.util.zip only: the same code runs on Android). */
    public static byte[] png(int[] argb, int width, int height) {
        byte[] raw = new byte[height * (1 + width * 3)];
        int at = 0;
        for (int y = 0; y < height; y++) {
            raw[at++] = 0;  // filter: none
            for (int x = 0; x < width; x++) {
                int p = argb[y * width + x];
                raw[at++] = (byte) (p >> 16);
                raw[at++] = (byte) (p >> 8);
                raw[at++] = (byte) p;
            }
        }
        Deflater deflater = new Deflater(Deflater.BEST_SPEED);
        deflater.setInput(raw);
        deflater.finish();
        ByteArrayOutputStream z = new ByteArrayOutputStream();
        byte[] buf = new byte[1 << 16];
        while (!deflater.finished()) {
            z.write(buf, 0, deflater.deflate(buf));
        }
        deflater.end();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(new byte[] {(byte) 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}, 0, 8);
        ByteBuffer header = ByteBuffer.allocate(13).putInt(width).putInt(height);
        header.put((byte) 8).put((byte) 2).put((byte) 0).put((byte) 0).put((byte) 0);  // 8-bit RGB
        chunk(out, "IHDR", header.array());
        chunk(out, "IDAT", z.toByteArray());
        chunk(out, "IEND", new byte[0]);
        return out.toByteArray();
    }

    private static void chunk(ByteArrayOutputStream out, String type, byte[] body) {
        byte[] tag = type.getBytes(StandardCharsets.US_ASCII);
        CRC32 crc = new CRC32();
        crc.update(tag);
        crc.update(body);
        out.write(ByteBuffer.allocate(4).putInt(body.length).array(), 0, 4);
        out.write(tag, 0, 4);
        out.write(body, 0, body.length);
        out.write(ByteBuffer.allocate(4).putInt((int) crc.getValue()).array(), 0, 4);
    }
}
