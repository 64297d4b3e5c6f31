package dev.deployc;

import static org.junit.Assert.assertEquals;
import static org.junit.Assume.assumeNotNull;

import java.awt.image.BufferedImage;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;
import java.util.Map;
import javax.imageio.ImageIO;
import org.junit.Test;

/**
 * Images and audio through the Java API (tests/e2e/test_clip.py runs it): a file's bytes and the same content
 * as pixels or samples give deployc run's results. Properties: deployc.clip, deployc.image, deployc.expected
 * (the CLIP bundle, a PNG, deployc run's similar_images for it); deployc.audio, deployc.wav, deployc.samples,
 * deployc.features (the audio bundle, a WAV, its samples as float32, deployc run's features for it).
 */
public class MediaTest {
    @Test
    @SuppressWarnings("unchecked")
    public void anImagesBytesAndItsPixelsFindWhatDeploycRunFinds() throws Exception {
        String bundle = System.getProperty("deployc.clip");
        assumeNotNull(bundle);
        byte[] png = Files.readAllBytes(Paths.get(System.getProperty("deployc.image")));
        List<Object> expected = (List<Object>) Json.parse(new String(
                Files.readAllBytes(Paths.get(System.getProperty("deployc.expected"))), StandardCharsets.UTF_8));
        BufferedImage image = ImageIO.read(Paths.get(System.getProperty("deployc.image")).toFile());
        int w = image.getWidth();
        int h = image.getHeight();
        int[] argb = image.getRGB(0, 0, w, h, null, 0, w);
        try (Bundle b = Bundle.open(bundle)) {
            assertEquals("image", b.inputs().get(0).name);
            assertEquals("image", b.inputs().get(0).type);
            for (Inputs inputs : new Inputs[] {new Inputs().image("image", png), new Inputs().image("image", argb, w, h)}) {
                List<Chunk> found = b.run(inputs).chunks("similar_images");
                assertEquals(expected.size(), found.size());
                for (int i = 0; i < found.size(); i++) {
                    Map<String, Object> want = (Map<String, Object>) expected.get(i);
                    assertEquals(want.get("source"), found.get(i).source);
                    assertEquals(((Number) want.get("score")).doubleValue(), found.get(i).score, 1e-5);
                }
            }
        }
    }

    @Test
    @SuppressWarnings("unchecked")
    public void aWavsBytesAndItsSamplesHearWhatDeploycRunHears() throws Exception {
        String bundle = System.getProperty("deployc.audio");
        assumeNotNull(bundle);
        byte[] wav = Files.readAllBytes(Paths.get(System.getProperty("deployc.wav")));
        ByteBuffer raw = ByteBuffer.wrap(Files.readAllBytes(Paths.get(System.getProperty("deployc.samples"))))
                .order(ByteOrder.LITTLE_ENDIAN);
        float[] samples = new float[raw.remaining() / 4];
        raw.asFloatBuffer().get(samples);
        List<Object> features = (List<Object>) Json.parse(new String(
                Files.readAllBytes(Paths.get(System.getProperty("deployc.features"))), StandardCharsets.UTF_8));
        try (Bundle b = Bundle.open(bundle)) {
            Result r = b.run(new Inputs().audio("clip", samples, 22050).audio("other", wav));
            float[] got = r.floats("features");
            assertEquals(features.size(), got.length);
            for (int i = 0; i < got.length; i++) {
                assertEquals(((Number) features.get(i)).doubleValue(), got[i], 1e-5);
            }
            assertEquals(1.0, r.floats("same")[0], 1e-5);  // the same sound: identical unit embeddings
        }
    }
}
