package dev.deployc;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.fail;

import java.nio.file.Files;
import java.nio.file.Paths;
import org.junit.Test;

/**
 * The files Inputs makes of pixels and samples, written to deployc.out for Python to read back
 * (tests/runtime/test_jni.py): a PNG of ARGB pixels and a float32 WAV of samples.
 */
public class InputsTest {
    @Test
    public void writesPixelsAsPngAndSamplesAsWav() throws Exception {
        int w = 7;
        int h = 5;
        int[] argb = new int[w * h];
        for (int i = 0; i < argb.length; i++) {
            argb[i] = (0x80 << 24) | ((i * 37) & 0xFF) << 16 | ((i * 11) & 0xFF) << 8 | ((255 - i * 5) & 0xFF);
        }
        Files.write(Paths.get(System.getProperty("deployc.out"), "pixels.png"), Inputs.png(argb, w, h));
        float[] samples = new float[1000];
        for (int i = 0; i < samples.length; i++) {
            samples[i] = (float) Math.sin(i * 0.05) * 0.5f;
        }
        Files.write(Paths.get(System.getProperty("deployc.out"), "samples.wav"), Inputs.wav(samples, 22050));
    }

    @Test
    public void refusesPixelsThatAreNotTheImagesSize() {
        try {
            new Inputs().image("image", new int[10], 3, 3);
            fail("10 pixels taken as 3 x 3");
        } catch (IllegalArgumentException e) {
            assertEquals("image image: 10 pixels are not 3 x 3", e.getMessage());
        }
        try {
            new Inputs().text("a", "x").text("a", "y");
            fail("an input given twice");
        } catch (IllegalArgumentException e) {
            assertEquals("input a is given twice", e.getMessage());
        }
    }
}
